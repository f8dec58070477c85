"""Heap soak: is what gputop's Python code holds flat over a long run? (soak.py watches RSS from outside; this
looks inside.)

Starts soak.py's target, then runs gputop's headless command in this process under tracemalloc and, every
``--every`` seconds, writes the traced heap (and RSS, which tracemalloc's own tables inflate) to
``OUT/series.txt``. At each of ``--snapshots`` (seconds) it dumps a tracemalloc snapshot (``OUT/snap_S.tm``)
and at the end prints the allocation sites that grew most between the first and last snapshot:

    python benchmarks/heap_soak.py --duration 1500 --snapshots 660,1440 --out /tmp/heap

This is how the diagnosis caches that held 2528 frames' stacks were found (docs/benchmarks.md, "An hour
without growth").
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import subprocess
import sys
import threading
import time
import tracemalloc
import types
from collections import deque
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.soak import TARGET_READY_TIMEOUT_S, kill_tree, wait_for_line  # noqa: E402


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def malloc_mb() -> str:
    """glibc's view across all arenas: bytes in use, bytes free but held, bytes in mmapped blocks. With the
    traced heap this tells Python objects piling up (traced grows) from C allocations (in use grows) from
    fragmentation (free-but-held grows while in use does not)."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallinfo2.restype = _MallInfo2
        info = libc.mallinfo2()
    except (OSError, AttributeError):
        return ""
    return (f" malloc_in_use_mb={info.uordblks / 2**20:.2f} malloc_free_held_mb={info.fordblks / 2**20:.2f}"
            f" malloc_mmapped_mb={info.hblkhd / 2**20:.2f}")


def _describe(obj: object) -> str:
    if isinstance(obj, dict):
        return f"dict({len(obj)} keys, e.g. {list(obj)[:3]!r:.120})"
    if isinstance(obj, (list, tuple, deque)):
        return f"{type(obj).__name__}(len {len(obj)})"
    if isinstance(obj, types.FrameType):
        return f"frame {obj.f_code.co_filename.rsplit('/', 2)[-2:]}:{obj.f_lineno} {obj.f_code.co_name}"
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def frame_census(out: Path, elapsed: float) -> str:
    """How many gputop Frames are alive, and (into OUT/holders.txt) what holds the oldest one: the History keeps
    DEFAULT_HISTORY_FRAMES, so more than that alive means something else keeps frames the History let go."""
    from probes.diagnosis import frame_stacks, rank_projection, stacks
    from probes.frame import Frame
    from probes.monitoring.history import DEFAULT_HISTORY_FRAMES
    from probes.sampling.pyspy import StackSampler
    from probes.sampling.pyspy_output import frame_cache_size, stack_cache_size

    objects = gc.get_objects()
    frames = [o for o in objects if type(o) is Frame]
    samplers = [o for o in objects if type(o) is StackSampler]
    del objects
    census = (f" frames_alive={len(frames)} stack_cache={stack_cache_size()} frame_cache={frame_cache_size()}"
              f" classify_cache={len(stacks._classify_cache)}"
              f" frame_summaries={len(frame_stacks._frame_cache)} projections={len(rank_projection._projections)}")
    for sampler in samplers:  # its idle flags per (thread, position) and per position
        census += (f" thread_position_idle={len(sampler._results.idle.by_thread)}"
                   f" process_position_idle={len(sampler._results.idle.by_process)}"
                   f" position_idle={len(sampler._results.idle.anywhere)}")
    del samplers
    if len(frames) > DEFAULT_HISTORY_FRAMES + 5:
        oldest = min(frames, key=lambda f: f.seq)
        newest = max(f.seq for f in frames)
        del frames
        here = sys._getframe()
        lines = [f"--- {elapsed:.0f}s: oldest alive seq {oldest.seq}, newest {newest}"]
        level, seen = [oldest], {id(oldest)}
        for depth in range(4):  # who holds it, and who holds those
            holders = []
            for obj in level:
                for holder in gc.get_referrers(obj):
                    if holder is here or id(holder) in seen or holder is level:
                        continue
                    seen.add(id(holder))
                    holders.append(holder)
                    lines.append(f"{'  ' * (depth + 1)}{_describe(holder)}")
            level = holders[:8]
        with (out / "holders.txt").open("a") as held:
            held.write("\n".join(lines) + "\n")
    return census


def watch_heap(out: Path, every: float, snapshot_at: list[float], started: float, stop: threading.Event,
               census_every: float) -> None:
    pending = sorted(snapshot_at)
    next_census = census_every
    with (out / "series.txt").open("w") as series:
        while not stop.wait(every):
            elapsed = time.monotonic() - started
            traced, _ = tracemalloc.get_traced_memory()
            census = ""
            if census_every and elapsed >= next_census:
                next_census += census_every
                census = frame_census(out, elapsed)
            series.write(f"{elapsed:.0f} traced_mb={traced / 2**20:.2f} rss_mb={rss_mb():.2f}{malloc_mb()}"
                         f"{census}\n")
            series.flush()
            if pending and elapsed >= pending[0]:
                tracemalloc.take_snapshot().dump(str(out / f"snap_{int(pending.pop(0))}.tm"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=1500.0)
    parser.add_argument("--snapshots", default="660,1440", help="seconds at which to dump a snapshot")
    parser.add_argument("--every", type=float, default=10.0)
    parser.add_argument("--out", type=Path, default=Path("heap-soak"))
    parser.add_argument("--record", action="store_true", help="record frames too, as soak.py does by default")
    parser.add_argument("--census-every", type=float, default=0.0,
                        help="count live Frames this often, seconds, and log what holds the oldest (0: never)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    snapshot_at = [float(s) for s in args.snapshots.split(",") if s]

    log_path = args.out / "target.log"
    with log_path.open("w") as log:
        target = subprocess.Popen([sys.executable, str(HERE / "soak.py"), "_target", "--seconds",
                                   f"{args.duration + 300:g}"], stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
    stop = threading.Event()
    try:
        wait_for_line(log_path, "ready", target, TARGET_READY_TIMEOUT_S)
        tracemalloc.start(12)
        threading.Thread(target=watch_heap, args=(args.out, args.every, snapshot_at, time.monotonic(), stop,
                                                 args.census_every),
                         daemon=True).start()
        from tui.cli import main as gputop

        command = ["--pid", str(target.pid), "--snapshot", str(args.out / "snapshot.json"),
                   "--duration", f"{args.duration:g}", "--no-gpu"]
        if args.record:
            command += ["--record", str(args.out / "recording.jsonl")]
        try:
            gputop(command)
        except SystemExit:
            pass
    finally:
        stop.set()
        kill_tree(target)
    dumped = sorted(args.out.glob("snap_*.tm"), key=lambda p: int(p.stem.split("_")[1]))
    if len(dumped) >= 2:
        first, last = tracemalloc.Snapshot.load(str(dumped[0])), tracemalloc.Snapshot.load(str(dumped[-1]))
        print(f"grew most between {dumped[0].name} and {dumped[-1].name}:")
        for stat in last.compare_to(first, "lineno")[:10]:
            print(f"  {stat.size_diff / 1024:+8.0f} KiB  {stat.traceback.format()[-1].strip()}")


if __name__ == "__main__":
    main()
