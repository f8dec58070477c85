"""A deliberately slow HTTP server on 127.0.0.1 for the io_bound case: every response trickles out in
small chunks with pauses, like an overloaded object store.

On SIGUSR1 it goes silent: connections stay open and nothing more is sent (a peer that hangs rather than
closes).

Usage: diag_slow_http_server.py [--lifetime S] [--chunk BYTES] [--pause S]. Binds an ephemeral port and
prints "port N". It serves at most --lifetime seconds (default 60) and then exits by itself.
"""

from __future__ import annotations

import argparse
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SHARD_BYTES = 64 * 1024


def make_handler(chunk: int, pause: float, stalled: threading.Event):
    class SlowShardHandler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(SHARD_BYTES))
            self.end_headers()
            sent = 0
            try:
                while sent < SHARD_BYTES:
                    if stalled.is_set():
                        time.sleep(3600)  # silent, the connection held open
                    piece = min(chunk, SHARD_BYTES - sent)
                    self.wfile.write(b"x" * piece)
                    self.wfile.flush()
                    sent += piece
                    time.sleep(pause)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, *args) -> None:  # keep the test output quiet
            pass

    return SlowShardHandler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lifetime", type=float, default=60.0)
    parser.add_argument("--chunk", type=int, default=2048)
    parser.add_argument("--pause", type=float, default=0.05)
    args = parser.parse_args()
    stalled = threading.Event()
    signal.signal(signal.SIGUSR1, lambda *_: stalled.set())
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(args.chunk, args.pause, stalled))
    server.daemon_threads = True
    threading.Timer(args.lifetime, server.shutdown).start()
    print(f"port {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
