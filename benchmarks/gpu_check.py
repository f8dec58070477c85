"""The prepared GPU check (issue 30, item 5; docs/benchmarks.md, "The GPU check"): in one call on an H100 or H200,
under 8 minutes, the canonical GPU cases, each watched by gputop, plus `gputop probe` eager and compiled; their
recordings and snapshots as fixtures, and one summary of what gputop said against what was built in.

    bash benchmarks/gpu_check.sh                        # on the GPU machine: what the `device` tool's run calls
    python benchmarks/gpu_check.py --cpu --out DIR      # the same pipeline on this machine's CPU: tiny, ~1 minute

The cases, their budgets and what each is built to be are in benchmarks/gpu_check_cases.py. Each case runs by
itself on the GPU: a job started in its own process group, its log read until it is in its steady state (or
until the time left for it says watch now), gputop's headless command run against it (``--pid P --record ...
--snapshot ... --duration N``, with the matching probe as ``--baseline``), the job stopped. A case that fails
(a job that exits, a probe that runs out of memory, a budget overrun) is recorded with why, and the check goes
on. OUT then holds fixtures.tar.gz (each case's gzipped recording, snapshot and log; the probes' JSON and
stderr; the summary), summary.json and summary.md; benchmarks/gpu_check.sh adds run.log: four files, within the
`device` tool's eight.

gputop runs with Textual's import refused (GPUTOP below): the GPU machine has no Textual, and headless gputop must
not need it; this dry run fails the same way if it ever does.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import IO, Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

import gpu_check_cases as cases  # noqa: E402  (beside this script, which runs as a file)
import gpu_check_summary as summary  # noqa: E402
from synthetic_tokens import write_dataset  # noqa: E402

sys.path.insert(0, str(REPO))
from probes.sensors.nvml import read_once  # noqa: E402  (the one module that reads NVML; pynvml only when it reads)
from tui.demo import stop_process_group  # noqa: E402  (standard library only at import: no Textual)

NANOGPT = REPO / ".gpu_check" / "nanoGPT"  # benchmarks/fetch_nanogpt.sh puts it there
NANOGPT_FILES = ("train.py", "model.py", "configurator.py")
PROGRESS = {"nanogpt": re.compile(r"^iter \d+:", re.MULTILINE), "loop": re.compile(r"^step \d+ \|", re.MULTILINE)}
POLL_S = 0.5
STOP_GRACE_S = 10.0
GPU_FREE_WAIT_S = 10.0  # after a case, for the driver to let go of its memory before the next one starts
LOG_TAIL_CHARS = 600

GPUTOP = """\
import sys
class _NoTextual:
    def find_spec(self, name, path=None, target=None):
        if name == "textual" or name.startswith("textual."):
            raise ImportError("the GPU machine has no Textual, and headless gputop must not need it")
sys.meta_path.insert(0, _NoTextual())
sys.argv[0] = "gputop"
from tui.cli import main
main()
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or REPO / ".gpu_check" / "out"),
                        help="where fixtures.tar.gz, summary.json and summary.md go (default: $OUT)")
    parser.add_argument("--cpu", "--dry-run", dest="cpu", action="store_true",
                        help="the same pipeline on the CPU: tiny shapes, short watches, compile off")
    parser.add_argument("--cases", default=",".join(cases.CASE_NAMES),
                        help="comma-separated subset, in the table's order (a rerun of the ones that failed)")
    parser.add_argument("--nanogpt", type=Path, default=NANOGPT, help="karpathy/nanoGPT's files")
    parser.add_argument("--work", type=Path, help="where the jobs run and the fixtures gather (default: a temp dir)")
    parser.add_argument("--no-deadlines", action="store_true",
                        help="each case runs to its own end (its steps, its watch): the budgets are the lent GPU's "
                             "minutes, and a test of the pipeline on a loaded machine judges what ran, not how fast")
    args = parser.parse_args(argv)
    unknown = set(args.cases.split(",")) - set(cases.CASE_NAMES)
    if unknown:
        parser.error(f"no such case: {', '.join(sorted(unknown))} (the cases: {', '.join(cases.CASE_NAMES)})")
    return args


def machine_facts(cpu: bool, nanogpt: Path) -> dict[str, Any]:
    """The machine the check ran on: the GPU from NVML (none in the dry run), py-spy, nanoGPT's commit."""
    facts: dict[str, Any] = {"python": platform.python_version(), "cpus": os.cpu_count(), "host": platform.node()}
    pyspy = shutil.which("py-spy")
    if pyspy:
        version = subprocess.run([pyspy, "--version"], capture_output=True, text=True, check=False).stdout.split()
        facts["py_spy"] = version[-1] if version else pyspy
    commit_file = nanogpt / "COMMIT"
    facts["nanogpt_commit"] = commit_file.read_text().strip()[:7] if commit_file.exists() else None
    return facts if cpu else facts | gpu_facts()


def gpu_facts(nvml: Any = None) -> dict[str, Any]:
    """GPU 0's name, memory, power limit and the board's maximum one, the GPUs' count, the driver and who holds GPU 0,
    as probes/sensors/nvml.py reads them (None where this GPU or driver does not give one); without GPU 0's name and
    memory only why
    (gpu_reason), so that nothing runs on a GPU that may not be there. nvml: a module with pynvml's API (tests pass a
    fake); None: the real one."""
    reading = read_once(nvml=nvml)
    first = reading.devices[0] if reading.available and reading.devices else None
    if first is None or first.name is None or first.mem_total_bytes is None:
        return {"gpu_reason": f"NVML: {reading.reason or 'no name or memory for GPU 0'}"}
    return {"gpu_name": first.name, "gpu_memory_bytes": first.mem_total_bytes, "gpu_count": len(reading.devices),
            "driver": reading.driver_version,
            "power_limit_w": round(first.power_limit_w) if first.power_limit_w is not None else None,
            # The board's maximum as NVML's limit constraints give it: the power lever is offered only below it.
            "power_max_limit_w": round(first.power_max_limit_w) if first.power_max_limit_w is not None else None,
            "gpu_processes_at_start": [process.pid for process in first.processes]}


def gpu_processes(nvml: Any = None) -> list[int] | None:
    """The processes holding a compute context on GPU 0 (NVML's PIDs), or None where NVML cannot say."""
    reading = read_once(nvml=nvml)
    if not reading.available or not reading.devices:  # no NVML, no GPU: nothing to wait for
        return None
    return [process.pid for process in reading.devices[0].processes]


def wait_gpu_free(until: float) -> list[int] | None:
    """Wait until no process holds GPU 0, or until `until`: the processes still there (None: none, or unknown)."""
    while (holders := gpu_processes()) and time.monotonic() < until:
        time.sleep(POLL_S)
    return holders or None


def stop_group(process: subprocess.Popen) -> None:
    """End a process group this check started (its leader was started with setpgrp): TERM, then KILL, and the
    group's stragglers (DataLoader and compile workers) once the leader is gone, as the demo stops its target."""
    stop_process_group(process, grace_s=STOP_GRACE_S)


def start(argv: list[str], cwd: Path, stdout: IO, stderr: IO | int) -> subprocess.Popen:
    """A child in its own process group (not its own session: the GPU machine ends a command's leftovers only
    within its session), so that it and all its children can be ended together."""
    return subprocess.Popen(argv, cwd=cwd, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL,
                            env=os.environ | {"PYTHONUNBUFFERED": "1"}, preexec_fn=os.setpgrp)


def run_bounded(argv: list[str], cwd: Path, stdout: IO, stderr: IO | int, timeout_s: float) -> int | None:
    """Run to its end, or stop it at timeout_s: its exit status, or None when it ran out of time."""
    process = start(argv, cwd, stdout, stderr)
    try:
        return process.wait(timeout=max(timeout_s, 1.0) if timeout_s != float("inf") else None)
    except subprocess.TimeoutExpired:
        return None
    finally:
        stop_group(process)


def tail(path: Path) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return " ⏎ ".join(text[-LOG_TAIL_CHARS:].strip().splitlines()[-6:])


class Check:
    """One run of the check: where it works, what the machine is, and each case's outcome."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.cpu = args, args.cpu
        self.began = time.monotonic()
        limit = cases.CPU_TOTAL_LIMIT_S if self.cpu else cases.TOTAL_LIMIT_S
        self.limit_s = limit
        self.deadline = self.began + limit - (cases.CPU_PACKING_S if self.cpu else cases.PACKING_S)
        if args.no_deadlines:
            self.deadline = float("inf")
        self.work = args.work or Path(tempfile.mkdtemp(prefix="gpu_check_"))
        self.facts = machine_facts(self.cpu, args.nanogpt)
        self.batch = cases.xl_batch(self.facts.get("gpu_memory_bytes"))
        self.date = datetime.date.today().isoformat()
        device = (self.facts.get("gpu_name") or "cpu").lower()
        self.fixtures = self.work / f"gpu_check_{re.sub(r'[^a-z0-9]+', '_', device).strip('_')}_{self.date}"
        self.fixtures.mkdir(parents=True, exist_ok=True)
        self.nanogpt_dir = self.work / "nanoGPT"
        self.nanogpt_problem = self._prepare_nanogpt()
        self.outcomes: dict[str, dict[str, Any]] = {}
        self.loaded: dict[str, dict | None] = {}  # each case's snapshot or probe JSON

    def _prepare_nanogpt(self) -> str | None:
        """nanoGPT's three files copied beside the synthetic tokens (the carried folder stays as fetched)."""
        if not all((self.args.nanogpt / name).is_file() for name in NANOGPT_FILES):
            return f"nanoGPT's train.py is not in {self.args.nanogpt}: run benchmarks/fetch_nanogpt.sh"
        (self.nanogpt_dir / "config").mkdir(parents=True, exist_ok=True)
        for name in NANOGPT_FILES:
            shutil.copy2(self.args.nanogpt / name, self.nanogpt_dir / name)
        if self.cpu:
            write_dataset(self.nanogpt_dir, tokens=1 << 16, vocab=cases.TINY_VOCAB)
        else:
            write_dataset(self.nanogpt_dir)
        return None

    def gpu_label(self) -> str:
        return self.facts.get("gpu_name") or ("CPU (dry run)" if self.cpu else "no GPU")

    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def run(self, case: cases.Case) -> dict[str, Any]:
        budget = case.timing(self.cpu).budget_s
        if not self.cpu and not self.facts.get("gpu_name"):
            return {"status": "skipped", "reason": f"no GPU ({self.facts.get('gpu_reason')}); --cpu runs the dry run"}
        if self.left_s() < min(budget, case.timing(self.cpu).watch_s + cases.watch_margin(self.cpu) + 5):
            return {"status": "skipped", "reason": f"{self.left_s():.0f} s left of the check, its budget "
                                                   f"{budget:.0f} s"}
        if case.kind == "nanogpt" and self.nanogpt_problem:
            return {"status": "failed", "reason": self.nanogpt_problem}
        began = time.monotonic()
        case_deadline = self.deadline if self.args.no_deadlines else min(began + budget, self.deadline)
        try:
            outcome = self.probe(case, case_deadline) if case.kind == "probe" else self.watch(case, case_deadline)
        except Exception as error:  # the check goes on to the next case whatever broke in this one
            outcome = {"status": "failed", "reason": f"{type(error).__name__}: {error}"}
        if not self.cpu and (holders := wait_gpu_free(min(time.monotonic() + GPU_FREE_WAIT_S, case_deadline))):
            outcome["gpu_held_after"] = holders  # the next case may find less memory, or another's kernels
        return outcome | {"wall_s": round(time.monotonic() - began, 1), "budget_s": budget}

    def probe(self, case: cases.Case, case_deadline: float) -> dict[str, Any]:
        out, err = self.fixtures / f"{case.name}.json", self.fixtures / f"{case.name}.log"
        arguments = cases.probe_arguments(case, self.cpu, self.batch)
        with out.open("w") as stdout, err.open("w") as stderr:
            status = run_bounded([sys.executable, "-c", GPUTOP, "probe", *arguments], REPO, stdout, stderr,
                                 case_deadline - time.monotonic())
        command = "gputop probe " + " ".join(arguments)
        if status is None:
            return {"status": "failed", "reason": f"ran past its budget; stderr: {tail(err)}", "command": command}
        try:
            self.loaded[case.name] = json.loads(out.read_text())
        except json.JSONDecodeError:
            return {"status": "failed", "reason": f"exit {status}, no JSON; stderr: {tail(err)}", "command": command}
        if (torch_version := self.loaded[case.name].get("torch_version")) is not None:
            self.facts.setdefault("torch", torch_version)
        return {"status": "ok", "command": command, "exit": status}

    def job_command(self, case: cases.Case) -> tuple[list[str], Path]:
        if case.kind == "loop":
            return cases.loop_command(case, self.cpu), REPO
        settings = cases.nanogpt_settings(case, self.cpu, self.batch)
        config = f"config/gpu_check_{case.name}.py"
        (self.nanogpt_dir / config).write_text(cases.nanogpt_config(case, settings))
        return [sys.executable, "train.py", config], self.nanogpt_dir

    def wait_steady(self, job: subprocess.Popen, log: Path, case: cases.Case, watch_by: float) -> float | None:
        """Seconds until the job's log held case.steady_lines progress lines; None if watch_by came first."""
        began = time.monotonic()
        while time.monotonic() < watch_by and job.poll() is None:
            text = log.read_text(errors="replace") if log.exists() else ""
            if len(PROGRESS[case.kind].findall(text)) >= case.steady_lines:
                return round(time.monotonic() - began, 1)
            time.sleep(POLL_S)
        return None

    def watch(self, case: cases.Case, case_deadline: float) -> dict[str, Any]:
        timing = case.timing(self.cpu)
        argv, cwd = self.job_command(case)
        log, gputop_log = self.fixtures / f"{case.name}.log", self.fixtures / f"{case.name}.gputop.log"
        record, snapshot = self.work / f"{case.name}.jsonl", self.fixtures / f"{case.name}.json"
        outcome: dict[str, Any] = {"command": " ".join(argv[1:] if case.kind == "nanogpt" else argv)}
        with log.open("w") as job_out:
            job = start(argv, cwd, job_out, subprocess.STDOUT)
        try:
            steady_s = self.wait_steady(job, log, case, case_deadline - timing.watch_s - cases.watch_margin(self.cpu))
            outcome |= {"steady": steady_s is not None, "steady_after_s": steady_s}
            if job.poll() is not None:
                return outcome | {"status": "failed", "reason": f"the job exited ({job.returncode}) before it was "
                                                                f"watched: {tail(log)}"}
            gputop = ["--pid", str(job.pid), "--record", str(record), "--snapshot", str(snapshot),
                      "--duration", f"{timing.watch_s:g}"]
            if case.baseline and self.outcomes.get(case.baseline, {}).get("status") == "ok":
                gputop += ["--baseline", str(self.fixtures / f"{case.baseline}.json")]
            watch_began = time.monotonic()
            with gputop_log.open("w") as gputop_out:
                status = run_bounded([sys.executable, "-c", GPUTOP, *gputop], REPO, gputop_out, subprocess.STDOUT,
                                     case_deadline - time.monotonic())
            outcome |= {"watched_s": round(time.monotonic() - watch_began, 1), "gputop_exit": status,
                        "job_alive_after": job.poll() is None, "gputop": "gputop " + " ".join(gputop)}
        finally:
            stop_group(job)
        if record.exists():
            with record.open("rb") as plain, gzip.open(self.fixtures / f"{case.name}.jsonl.gz", "wb") as packed:
                shutil.copyfileobj(plain, packed)
            record.unlink()
        if not snapshot.exists():
            why = "ran past its budget" if outcome["gputop_exit"] is None else f"exit {outcome['gputop_exit']}"
            return outcome | {"status": "failed", "reason": f"gputop wrote no snapshot ({why}): {tail(gputop_log)}"}
        self.loaded[case.name] = json.loads(snapshot.read_text())
        return outcome | {"status": "ok"}

    def summarise(self, selected: list[cases.Case]) -> dict[str, Any]:
        rows = [summary.probe_row(case, self.outcomes[case.name], self.loaded.get(case.name)) if case.kind == "probe"
                else summary.watched_row(case, self.outcomes[case.name], self.loaded.get(case.name), judge=not self.cpu)
                for case in selected]
        judged = [row["as_built"] for row in rows if row.get("as_built") is not None]
        mode_note = ("Dry run on the CPU (--cpu): tiny shapes, short watches, compile off; the expected bottlenecks "
                     "are the GPU's, not judged here." if self.cpu else "On the GPU.")
        return {"schema": "gputop.gpu_check/1", "date": self.date, "mode": "cpu" if self.cpu else "gpu",
                "gpu_label": self.gpu_label(),
                "mode_note": mode_note, "gputop_commit": os.environ.get("GPU_CHECK_COMMIT") or git_commit(),
                "machine": self.facts, "xl_batch": None if self.cpu else self.batch, "limit_s": self.limit_s,
                "wall_s": round(time.monotonic() - self.began, 1),
                "ok": sum(row["status"] == "ok" for row in rows),
                "as_built": f"{sum(judged)} of {len(judged)}" if judged else "none judged", "cases": rows}

    def pack(self, document: dict[str, Any], out: Path) -> None:
        """summary.json and summary.md into the fixtures and into OUT, and the fixtures as one tar.gz."""
        out.mkdir(parents=True, exist_ok=True)
        text = summary.markdown(document)
        for folder in (self.fixtures, out):
            (folder / "summary.json").write_text(json.dumps(document, indent=1) + "\n")
            (folder / "summary.md").write_text(text)
        with tarfile.open(out / "fixtures.tar.gz", "w:gz") as archive:
            archive.add(self.fixtures, arcname=self.fixtures.name)


def git_commit() -> str | None:
    """The checkout's commit, and whether its files differ from it; None without git (the GPU machine gets the
    files alone: there GPU_CHECK_COMMIT names it)."""
    try:
        found = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                               check=False, timeout=10)
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                                 capture_output=True, text=True, check=False, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    commit = found.stdout.strip()
    return None if not commit else commit + (" with uncommitted changes" if changed.stdout.strip() else "")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if (problem := cases.budget_problem(args.cpu)) is not None:
        print(f"gpu_check: {problem}", file=sys.stderr)
        return 2
    # Stopped from outside (the device tool's time limit, a kill): end the jobs this check started, through the
    # `finally` of each case, rather than leave them holding the GPU in their own process groups.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    check = Check(args)
    print(f"gpu_check: {'CPU dry run' if check.cpu else check.facts.get('gpu_name') or 'no GPU'}; work in "
          f"{check.work}; {check.left_s():.0f} s for the cases", flush=True)
    selected = [case for case in cases.CASES if case.name in args.cases.split(",")]
    for case in selected:
        print(f"gpu_check: {case.name} ({case.timing(check.cpu).budget_s:.0f} s at most) ...", flush=True)
        check.outcomes[case.name] = outcome = check.run(case)
        print(f"gpu_check: {case.name}: {outcome['status']} in {outcome.get('wall_s', 0):.0f} s"
              + (f": {outcome['reason']}" if outcome.get("reason") else ""), flush=True)
    document = check.summarise(selected)
    check.pack(document, args.out)
    print("\n".join((summary.TABLE_HEAD, *summary.table_rows(document["gpu_label"], document["cases"]))), flush=True)
    print(f"gpu_check: {args.out}/fixtures.tar.gz, summary.json, summary.md ({document['wall_s']:.0f} s)", flush=True)
    return 0 if document["ok"] == len(selected) else 1


if __name__ == "__main__":
    sys.exit(main())
