"""The diagnosis end to end: a real target process per case, watched by the real command
(`python -m tui --pid P --snapshot OUT --duration D --record REC`), the verdict read from the snapshot.

Each test also replays its recording through diagnose() tick by tick, to check that a verdict came (how soon
goes in the table below, not in an assertion), that no slow case was ever called hung, and, for the hangs,
that hung came within hang-after + 2 s.
Set GPUTOP_DIAG_TABLE=path to append one markdown row per case (the table in the diagnosis report).
The GPU-side cases, which need a GPU to run for real, are replayed from constructed recordings in
tests/fixtures/frames through `gputop replay --snapshot`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO
from support.processes import start_logged, wait_for
from support.recorded import frames_so_far

from probes.diagnosis.verdict import diagnose
from probes.outputs.recording import read_recording

pytestmark = pytest.mark.slow

DURATION_S = 8.0
HANG_AFTER_S = 5.0
FIXTURES = Path(__file__).parents[1] / "fixtures" / "frames"


def watch(pid: int, tmp_path: Path, case: str, duration: float = DURATION_S, extra: tuple[str, ...] = ()):
    """Run the gputop command on `pid`; return (snapshot verdict, recorded frames).

    With GPUTOP_DIAG_SAVE_RECORDINGS=DIR the recording is kept as DIR/real_<case>.jsonl (how the
    recordings in tests/fixtures/frames were made)."""
    snapshot, recording = tmp_path / "snapshot.json", tmp_path / "frames.jsonl"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run(
        [sys.executable, "-m", "tui", "--pid", str(pid), "--snapshot", str(snapshot), "--duration",
         str(duration), "--record", str(recording), "--no-gpu", *extra],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=duration + 60,
    )
    assert result.returncode == 0, result.stderr
    keep = os.environ.get("GPUTOP_DIAG_SAVE_RECORDINGS")
    if keep:
        shutil.copyfile(recording, Path(keep) / f"real_{case}.jsonl")
    document = json.loads(snapshot.read_text())
    return document["verdict"], list(read_recording(recording))


def watch_until(pid: int, tmp_path: Path, case: str, reached, timeout: float = 90.0,
                extra: tuple[str, ...] = ()):
    """Run the gputop command on `pid` until the verdict it would show satisfies `reached(verdict)` (replayed
    from its recording as it grows), then stop it; return (snapshot verdict, recorded frames).

    For cases whose evidence builds up at the pace of the target (compiles, sample windows), so the test
    waits for a state instead of guessing how many seconds this machine needs."""
    from probes.monitoring.monitor import Monitor

    snapshot, recording = tmp_path / "snapshot.json", tmp_path / "frames.jsonl"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    command = subprocess.Popen(
        [sys.executable, "-m", "tui", "--pid", str(pid), "--snapshot", str(snapshot), "--duration",
         str(timeout + 30), "--record", str(recording), "--no-gpu", *extra],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    monitor = Monitor(hang_after_s=HANG_AFTER_S)
    seen = 0

    def verdict_reached():
        nonlocal seen
        frames = frames_so_far(recording)
        for frame in frames[seen:]:
            monitor.ingest(frame)
        seen = len(frames)
        return monitor.view is not None and reached(monitor.view.verdict)

    try:
        wait_for(verdict_reached, timeout=timeout, interval=0.5)
    except pytest.fail.Exception:
        last = monitor.view.verdict if monitor.view is not None else None
        said = f"{last.bottleneck}/{last.liveness}: {' | '.join(last.evidence[:3])}" if last else "no frame"
        pytest.fail(f"{case}: the verdict sought did not come within {timeout:g} s over {seen} frames; "
                    f"the last was {said}")
    finally:
        command.send_signal(signal.SIGTERM)  # headless: stop now and write the snapshot
        _, stderr = command.communicate(timeout=60)
        keep = os.environ.get("GPUTOP_DIAG_SAVE_RECORDINGS")
        if keep and recording.exists():  # a failed run's recording too: it says why
            shutil.copyfile(recording, Path(keep) / f"real_{case}.jsonl")
    assert command.returncode == 0, stderr
    return json.loads(snapshot.read_text())["verdict"], list(read_recording(recording))


def replay_timeline(frames, hang_after_s: float = HANG_AFTER_S):
    """[(seconds since attach, verdict)] as the live loop saw them."""
    attached = frames[0].time - frames[0].interval_s
    timeline, verdict = [], None
    for i in range(1, len(frames) + 1):
        verdict = diagnose(frames[:i], verdict, hang_after_s=hang_after_s)
        timeline.append((frames[i - 1].time - attached, verdict))
    return timeline


def first_time(timeline, predicate) -> float | None:
    return next((t for t, v in timeline if predicate(v)), None)


def record_row(case: str, verdict: dict, timeline) -> None:
    first = first_time(timeline, lambda v: v.bottleneck != "unknown" or v.liveness == "hung")
    line = (f"| {case} | {verdict['bottleneck']} | {verdict['liveness']} | {verdict['confidence']:.2f} | "
            f"{first:.1f} s | {verdict['evidence'][0] if verdict['evidence'] else ''} |")
    print(line)
    table = os.environ.get("GPUTOP_DIAG_TABLE")
    if table:
        with open(table, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")


def check(case: str, verdict: dict, frames, bottleneck: str, liveness: str, names: str,
          hang_after_s: float = HANG_AFTER_S) -> list:
    """The common assertions: verdict, responsible frame named, first verdict in time, no false hung."""
    timeline = replay_timeline(frames, hang_after_s)
    record_row(case, verdict, timeline)
    evidence = "\n".join(verdict["evidence"])
    assert (verdict["bottleneck"], verdict["liveness"]) == (bottleneck, liveness), evidence
    # "87% of 40 samples preparing data in X" becomes "..., most often in X (89% of those)" when X is not nearly
    # all of them, which depends on where py-spy's samples fell: the frame named is what is checked.
    assert names in evidence.replace(", most often in ", " in "), evidence
    first = first_time(timeline, lambda v: v.bottleneck != "unknown" or v.liveness == "hung")
    if liveness != "hung":
        # A verdict came while watching. How soon is a figure (docs/diagnosis.md's table, GPUTOP_DIAG_TABLE), not an
        # assertion: on a crowded machine py-spy's first window can take seconds longer.
        assert first is not None, timeline
        assert not any(v.liveness == "hung" for _, v in timeline), "a false hung on a slow case"
    return timeline


def test_dataloader_with_slow_workers_is_data_bound(spawn_target, tmp_path):
    target = start_logged(spawn_target, tmp_path, "diag_dataloader.py")
    verdict, frames = watch(target.pid, tmp_path, "dataloader")
    check("DataLoader, 2 slow workers", verdict, frames, "data_bound", "progressing",
          "waiting for the next batch in _BaseDataLoaderIter.__next__ (torch/utils/data/dataloader.py")
    assert "SlowTransformDataset.__getitem__ (diag_dataloader.py" in "\n".join(verdict["evidence"])
    assert "DataLoader worker" in "\n".join(verdict["evidence"])


def test_main_thread_tokenization_is_data_bound(spawn_target, tmp_path):
    target = start_logged(spawn_target, tmp_path, "diag_tokenize.py")
    verdict, frames = watch(target.pid, tmp_path, "tokenize")
    check("tokenization on the main thread", verdict, frames, "data_bound", "progressing",
          "preparing data on the main thread in tokenize_text (diag_tokenize.py")
    assert any("pre-tokenize" in a for a in verdict["advice_text"])


def test_cpu_training_loop_is_cpu_bound(spawn_target, tmp_path):
    target = start_logged(spawn_target, tmp_path, "diag_cpu_train.py")
    verdict, frames = watch(target.pid, tmp_path, "cpu_train")
    check("CPU training loop", verdict, frames, "cpu_bound", "progressing", "running on the CPU")
    assert "train_step (diag_cpu_train.py" in "\n".join(verdict["evidence"])


def test_deadlock_is_hung_with_where(spawn_target, tmp_path):
    target = start_logged(spawn_target, tmp_path, "diag_deadlock.py")
    verdict, frames = watch(target.pid, tmp_path, "deadlock")
    timeline = check("lock-order deadlock", verdict, frames, "unknown", "hung", "stuck at diag_deadlock.py:")
    assert re.search(r"stuck at diag_deadlock\.py:\d+ in rotate_logs", "\n".join(verdict["evidence"]))
    hung_at = first_time(timeline, lambda v: v.liveness == "hung")
    assert hung_at is not None and hung_at <= HANG_AFTER_S + 2.0, timeline
    assert "thread metrics-flusher also waiting in flush_metrics (diag_deadlock.py" in \
        "\n".join(verdict["evidence"])


def test_dead_producer_is_hung_and_names_the_dead_producer(spawn_target, tmp_path):
    # The producer dies while gputop watches (it stays an unreaped zombie, as in real jobs), so the run
    # shows progress first and then the hang; --hang-after 3 leaves time to see both.
    target = start_logged(spawn_target, tmp_path, "diag_dead_producer.py", "--die-after", "2.5")
    verdict, frames = watch(target.pid, tmp_path, "dead_producer", extra=("--hang-after", "3"))
    timeline = check("queue whose producer died (--hang-after 3)", verdict, frames, "unknown", "hung",
                     "stuck at multiprocessing/queues.py:", hang_after_s=3.0)
    evidence = "\n".join(verdict["evidence"])
    assert re.search(r"stuck at multiprocessing/queues\.py:\d+ in Queue\.get", evidence), evidence
    # how it ended, from the status its zombie keeps (it calls os._exit(1)), then what that means for the queue
    assert "is a zombie (exited, not reaped): exited with status 1, as Python does on an uncaught exception — the " \
        "queue it fed will never fill" in evidence
    last_progress = max((t for t, v in timeline if v.liveness == "progressing"), default=0.0)
    hung_at = first_time(timeline, lambda v: v.liveness == "hung")
    assert hung_at is not None and hung_at - last_progress <= 3.0 + 2.0, timeline


def test_one_long_native_op_is_cpu_bound_not_hung(spawn_target, tmp_path):
    target = start_logged(spawn_target, tmp_path, "diag_native_op.py")
    verdict, frames = watch(target.pid, tmp_path, "native_op")
    check("one long native op", verdict, frames, "cpu_bound", "progressing",
          "one_long_matmul (diag_native_op.py")
    assert "slow, not hung" in verdict["evidence"][0]


def test_sleepy_loop_is_idle_not_hung(spawn_target, tmp_path):
    target = start_logged(spawn_target, tmp_path, "diag_sleepy.py")
    verdict, frames = watch(target.pid, tmp_path, "sleepy")
    # Quiet, py-spy sees it waiting in the sleep; on a crowded machine a woken sleeper queues for a core with its
    # stack still on the sleep and py-spy counts it active, so schedstat's "asleep" line may name it instead.
    check("loop sleeping 2 s per step", verdict, frames, "idle", "progressing", " in main (diag_sleepy.py")


def test_torch_save_loop_is_checkpoint_save(spawn_target, tmp_path):
    target = start_logged(spawn_target, tmp_path, "diag_checkpoint.py", str(tmp_path))
    verdict, frames = watch(target.pid, tmp_path, "checkpoint")
    check("torch.save loop", verdict, frames, "checkpoint_save", "progressing",
          "saving a checkpoint in save (torch/serialization.py")


def test_compile_recompiling_on_new_shapes_is_a_storm(spawn_target, tmp_path):
    target = start_logged(spawn_target, tmp_path, "diag_compile.py", timeout=180.0)
    # A storm shows once two sample windows have caught a recompile after training: how many seconds that
    # takes depends on how fast this machine compiles, so wait for it.
    verdict, frames = watch_until(target.pid, tmp_path, "compile", lambda v: v.bottleneck == "compile_warmup"
                                  and any("recompilation storm" in line for line in v.evidence))
    check("torch.compile, new shape every few steps", verdict, frames, "compile_warmup", "progressing",
          "compiling in ")
    assert "recompilation storm" in verdict["evidence"][0]
    assert "TORCH_LOGS=recompiles" in verdict["advice_text"][0]


def test_the_first_compile_of_a_deep_model_is_the_warm_up_not_a_storm(spawn_target, tmp_path):
    # As nanoGPT's GPT-2 XL on an H200 (issue 29): a long first compile, no training step before it.
    target = start_logged(spawn_target, tmp_path, "diag_compile_once.py", timeout=120.0)
    warm_up = re.compile(r"torch\.compile warm-up: compiling for (\d+) s so far")

    def seen_for_a_while(verdict) -> bool:
        # Settled (not provisional), and measured over 10 s of compiling at least: several sample windows, each
        # of which could have been taken for training. How long that takes depends on this machine: wait for it.
        said = warm_up.match(verdict.evidence[0]) if verdict.evidence else None
        return (verdict.bottleneck == "compile_warmup" and said is not None and int(said.group(1)) >= 10
                and not any(line.startswith("provisional:") for line in verdict.evidence))

    verdict, frames = watch_until(target.pid, tmp_path, "compile_once", seen_for_a_while)
    timeline = check("torch.compile, first compile of 96 layers", verdict, frames, "compile_warmup", "progressing",
                     "compiling in ")
    assert warm_up.match(verdict["evidence"][0]), verdict["evidence"]
    said = "\n".join(verdict["evidence"] + verdict["advice_text"])
    assert "storm" not in said and "TORCH_LOGS" not in said and verdict["max_speedup"] is None, said
    assert not [v.evidence[0] for _, v in timeline if "storm" in "\n".join(v.evidence)]


def test_a_compiled_model_on_cpu_is_named_as_compiled_code_not_advised_to_compile(spawn_target, tmp_path):
    # nanochat's base_train and litgpt's pretrain on CPU (issue 29): the hot frame is Inductor's generated code.
    target = start_logged(spawn_target, tmp_path, "diag_compiled_cpu.py", timeout=300.0)
    # Wait for a settled verdict that names a hot frame (once enough samples are in), then read its words.
    verdict, frames = watch_until(target.pid, tmp_path, "compiled_cpu", lambda v: v.bottleneck == "cpu_bound"
                                  and not any(line.startswith("provisional:") for line in v.evidence)
                                  and any(line.startswith("The hot frame is") for line in v.advice))
    check("a torch.compile'd model training on the CPU", verdict, frames, "cpu_bound", "progressing",
          "running on the CPU")
    assert "torch.compile's generated code" in verdict["evidence"][0], verdict["evidence"]
    advice = "\n".join(verdict["advice_text"])
    assert "The hot frame is Runner.call (torch.compile's generated code" in advice, advice
    assert "the model already runs compiled" in advice
    assert "your own Python" not in advice and "torch.compile it" not in advice, advice


def test_streaming_from_a_slow_http_server_is_io_bound(spawn_target, tmp_path):
    server_out = tmp_path / "server.out"
    with server_out.open("w") as handle:
        spawn_target("diag_slow_http_server.py", "--lifetime", "60", stdout=handle,
                     ready=lambda proc: "port" in server_out.read_text())
    port = server_out.read_text().split()[1]
    target = start_logged(spawn_target, tmp_path, "diag_http_stream.py", f"http://127.0.0.1:{port}/shard")
    verdict, frames = watch(target.pid, tmp_path, "http")
    check("samples streamed from a slow HTTP server", verdict, frames, "io_bound", "progressing",
          "blocked reading in SocketIO.readinto (socket.py:")
    assert "fetch_shard (diag_http_stream.py" in verdict["evidence"][0]


def test_deadlock_beside_a_busy_heartbeat_thread_is_still_hung(spawn_target, tmp_path):
    # A third thread burns ~20% of a core and writes a log line every 50 ms: the process is never quiet,
    # but its main thread is, and that is the thread whose silence means hung.
    target = start_logged(spawn_target, tmp_path, "diag_deadlock.py", "--heartbeat", str(tmp_path / "beat.log"))
    verdict, frames = watch(target.pid, tmp_path, "deadlock_heartbeat")
    timeline = check("deadlock beside a busy heartbeat thread", verdict, frames, "unknown", "hung",
                     "stuck at diag_deadlock.py:")
    assert re.search(r"stuck at diag_deadlock\.py:\d+ in rotate_logs", "\n".join(verdict["evidence"]))
    hung_at = first_time(timeline, lambda v: v.liveness == "hung")
    assert hung_at is not None and hung_at <= HANG_AFTER_S + 2.0, timeline
    assert "main thread 0.00% CPU" in verdict["evidence"][0]


def test_stream_from_a_server_gone_silent_is_hung_and_names_the_peer(spawn_target, tmp_path):
    server_out = tmp_path / "server.out"
    with server_out.open("w") as handle:
        server = spawn_target("diag_slow_http_server.py", "--lifetime", "60", stdout=handle,
                              ready=lambda proc: "port" in server_out.read_text())
    port = server_out.read_text().split()[1]
    target = start_logged(spawn_target, tmp_path, "diag_http_stream.py", f"http://127.0.0.1:{port}/shard")
    os.kill(server.pid, signal.SIGUSR1)  # the server keeps the connection open and sends nothing more
    verdict, frames = watch(target.pid, tmp_path, "http_silent", extra=("--hang-after", "3"))
    timeline = check("stream from a server gone silent (--hang-after 3)", verdict, frames, "io_bound", "hung",
                     "stuck at socket.py:", hang_after_s=3.0)
    evidence = "\n".join(verdict["evidence"])
    assert re.search(r"stuck at socket\.py:\d+ in SocketIO\.readinto", evidence), evidence
    assert f"connected to 127.0.0.1:{port}" in evidence
    assert "the peer has gone silent" in evidence
    hung_at = first_time(timeline, lambda v: v.liveness == "hung")
    assert hung_at is not None and hung_at <= 3.0 + 2.0, timeline


def test_loop_in_a_tiny_cpu_quota_is_cpu_throttled(spawn_target, tmp_path, tiny_cpu_quota):
    target = start_logged(spawn_target, tmp_path, "diag_cpu_train.py", "--threads", "8")
    tiny_cpu_quota(target.pid)
    wait_for(lambda: "gputop_quota" in Path(f"/proc/{target.pid}/cgroup").read_text(), timeout=5)
    verdict, frames = watch(target.pid, tmp_path, "cpu_quota")
    check("8 torch threads in a 0.2-CPU cgroup", verdict, frames, "cpu_throttled", "progressing",
          "throttled in ")
    assert re.search(r"\d+ runnable threads? on 0\.2 CPUs", "\n".join(verdict["evidence"])), verdict["evidence"]
    assert "torch.set_num_threads(1)" in verdict["advice_text"][0]


@pytest.mark.parametrize("recording, bottleneck, names", [
    ("h200_gpu_bound.jsonl", "gpu_bound", "GPU 0: util 100%, SM clock 1980/1980 MHz, power 688/700 W"),
    ("h200_power_capped.jsonl", "gpu_throttled", "SM clock held at 72% of max by: software power cap"),
    ("h200_launch_bound.jsonl", "cpu_bound", "launch-bound"),
    ("h200_all_reduce.jsonl", "comms_bound", "in a collective: all_reduce (torch/distributed/distributed_c10d.py"),
])
def test_gpu_cases_replayed_through_the_command(tmp_path, recording, bottleneck, names):
    snapshot = tmp_path / "snapshot.json"
    result = subprocess.run(
        [sys.executable, "-m", "tui", "replay", str(FIXTURES / recording), "--snapshot", str(snapshot)],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    verdict = json.loads(snapshot.read_text())["verdict"]
    frames = list(read_recording(FIXTURES / recording))
    record_row(f"{recording} (constructed H200 frames)", verdict, replay_timeline(frames))
    assert (verdict["bottleneck"], verdict["liveness"]) == (bottleneck, "progressing")
    assert names in "\n".join(verdict["evidence"])
