"""The prepared GPU check (issues 30 and 41; docs/benchmarks.md, "The GPU check"): in one call of the `device` tool
on an H100 or H200, under 560 s, the canonical GPU cases, each watched by gputop, plus `gputop probe` eager and
compiled; their recordings and snapshots as fixtures, and one summary of what gputop said against what was built
in: the bottleneck, and the levers it offered, the top one's predicted gain set against the gain measured by running
the same job with that lever pulled (gpu_check_levers.py).

    bash benchmarks/gpu_check.sh                        # on the GPU machine: what the `device` tool's run calls
    python benchmarks/gpu_check.py --cpu --out DIR      # the same pipeline on this machine's CPU: tiny, ~2 minutes

It starts with a preflight (gpu_check_preflight.py): what is missing, one line each, installed from PyPI where it
answers, else from the wheels carried in .whl/.

The cases, their budgets and what each is built to be are in benchmarks/gpu_check_cases.py. Each case runs by
itself on the GPU: a job started in its own process group, its log read until it is in its steady state (or
until the time left for it says watch now), gputop's headless command run against it (``--pid P --record ...
--snapshot ... --duration N``, with the matching probe as ``--baseline``), the job stopped. A case that fails
(a job that exits, a probe that runs out of memory, a budget overrun) is recorded with why, and the check goes
on. After its watch, a case whose top lever the check can pull (gpu_check_cases.FIXES) runs again with it pulled,
unwatched, until its log has MEASURE_LINES steady lines; where another case already ran that very job (the compiled
case is the eager one with compile pulled), its log is the measurement. OUT then holds fixtures.tar.gz (each case's
gzipped recording, snapshot and log, its fix run's log; the probes' JSON and stderr; the summary), summary.json and
summary.md; benchmarks/gpu_check.sh adds run.log: four files, within the `device` tool's eight.

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
import gpu_check_levers as levers  # noqa: E402
import gpu_check_preflight as preflight  # noqa: E402
import gpu_check_summary as summary  # noqa: E402
from synthetic_tokens import write_dataset  # noqa: E402

sys.path.insert(0, str(REPO))
from probes.sensors.nvml import read_once  # noqa: E402  (the one module that reads NVML; pynvml only when it reads)
from tui.demo import stop_process_group  # noqa: E402  (standard library only at import: no Textual)

NANOGPT = HERE / "nanogpt"  # karpathy/nanoGPT's three files, vendored (its README names the commit)
SITE = Path("/tmp/site")  # where the preflight installs what is missing
WHEELS = REPO / ".whl"  # the carried wheels (benchmarks/fetch_wheels.sh)
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
    parser.add_argument("--site", type=Path, default=SITE, help="where the preflight installs what is missing")
    parser.add_argument("--wheels", type=Path, default=WHEELS, help="the carried wheels (fetch_wheels.sh)")
    parser.add_argument("--install", action=argparse.BooleanOptionalAction, default=None,
                        help="install what is missing (default: on the GPU, not in the dry run)")
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
    pyspy = preflight.present("py-spy")
    if pyspy:
        version = subprocess.run([pyspy, "--version"], capture_output=True, text=True, check=False).stdout.split()
        facts["py_spy"] = version[-1] if version else pyspy
    readme = nanogpt / "README.md"  # the vendored copy's README names its commit
    pinned = re.search(r"commit `([0-9a-f]{40})`", readme.read_text()) if readme.exists() else None
    facts["nanogpt_commit"] = pinned.group(1)[:7] if pinned else None
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


def start(argv: list[str], cwd: Path, stdout: IO, stderr: IO | int,
          environment: dict[str, str] | None = None) -> subprocess.Popen:
    """A child in its own process group (not its own session: the GPU machine ends a command's leftovers only
    within its session), so that it and all its children can be ended together."""
    return subprocess.Popen(argv, cwd=cwd, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL,
                            env=os.environ | {"PYTHONUNBUFFERED": "1"} | (environment or {}), preexec_fn=os.setpgrp)


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
        self.timed_jobs: dict[str, dict[str, Any]] = {}  # a nanoGPT job's key -> its median time, and whose run
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

    def job_command(self, case: cases.Case, fix: str | None = None) -> tuple[list[str], Path, dict[str, str]]:
        """The command, folder and added environment of a case's job, or of the same job with `fix` pulled."""
        if case.kind == "loop":
            return cases.loop_command(case, self.cpu, fix), REPO, {}
        job = cases.nanogpt_job(case, self.cpu, self.batch, fix)
        config = f"config/gpu_check_{case.name}{'_' + fix if fix else ''}.py"
        (self.nanogpt_dir / config).write_text(cases.nanogpt_config(case, job, fix))
        return [sys.executable, "train.py", config], self.nanogpt_dir, cases.job_environment(job)

    def job_key(self, case: cases.Case, fix: str | None = None) -> str | None:
        """What makes two runs the same job (a nanoGPT job's settings and patches), or None for a loop."""
        return cases.nanogpt_job(case, self.cpu, self.batch, fix).key() if case.kind == "nanogpt" else None

    def remember(self, case: cases.Case, fix: str | None, log: Path, by: str) -> dict[str, Any]:
        """The median seconds per unit of work of a run's steady lines, kept under its job's key for a later
        case whose fix is that job."""
        seconds, lines = levers.median_seconds(log.read_text(errors="replace") if log.exists() else "", case.kind,
                                               case.steady_lines, cases.fix_units(case, fix))
        timed = {"seconds": seconds, "lines": lines, "by": by}
        if (key := self.job_key(case, fix)) is not None and seconds is not None:
            kept = self.timed_jobs.get(key)
            if kept is None or lines > kept["lines"]:  # the run of that job with the most steady lines
                self.timed_jobs[key] = timed
        return timed

    def measure_fix(self, case: cases.Case, fix: str, base: dict[str, Any], case_deadline: float) -> dict[str, Any]:
        """The job with `fix` pulled, timed: from another case's run of that very job where one ran, else from a
        run of its own (unwatched, stopped once its log has MEASURE_LINES steady lines or at the case's end)."""
        measurement: dict[str, Any] = {"lever": fix, "base_s": base["seconds"], "base_lines": base["lines"]}
        known = self.timed_jobs.get(self.job_key(case, fix) or "")
        if known is not None and known["lines"] < levers.MEASURE_LINES:
            # Another case's run of that job ended with its watch before it logged enough steady lines (a loaded
            # machine: the dry run's 4 s watch of a job that prints one line a second): it gets a run of its own.
            known = None
        if known is None:
            argv, cwd, environment = self.job_command(case, fix)
            log = self.fixtures / f"{case.name}.{fix}.log"
            measurement["command"] = " ".join(argv[1:] if case.kind == "nanogpt" else argv)
            if not self.cpu:
                wait_gpu_free(min(time.monotonic() + GPU_FREE_WAIT_S, case_deadline))
            began = time.monotonic()
            with log.open("w") as out:
                job = start(argv, cwd, out, subprocess.STDOUT, environment)
            try:
                self.wait_lines(job, log, case, case.steady_lines + levers.MEASURE_LINES, case_deadline)
            finally:
                stop_group(job)
            measurement["run_s"] = round(time.monotonic() - began, 1)
            known = self.remember(case, fix, log, f"its own run ({log.name})")
            if known["seconds"] is None:
                return measurement | {"note": f"no steady line in time: {tail(log)}"}
        measurement |= {"fixed_s": known["seconds"], "fixed_lines": known["lines"], "by": known["by"]}
        if base["seconds"] is None:
            return measurement | {"note": "the job's own log gave no steady line"}
        return measurement | levers.measured_gain(base["seconds"], known["seconds"])

    def wait_steady(self, job: subprocess.Popen, log: Path, case: cases.Case, watch_by: float) -> float | None:
        """Seconds until the job's log held case.steady_lines progress lines; None if watch_by came first."""
        return self.wait_lines(job, log, case, case.steady_lines, watch_by)

    @staticmethod
    def wait_lines(job: subprocess.Popen, log: Path, case: cases.Case, lines: int, by: float) -> float | None:
        """Seconds until the job's log held `lines` progress lines; None if `by` came first or the job ended."""
        began = time.monotonic()
        while time.monotonic() < by and job.poll() is None:
            text = log.read_text(errors="replace") if log.exists() else ""
            if len(PROGRESS[case.kind].findall(text)) >= lines:
                return round(time.monotonic() - began, 1)
            time.sleep(POLL_S)
        return None

    def watch(self, case: cases.Case, case_deadline: float) -> dict[str, Any]:
        timing = case.timing(self.cpu)
        argv, cwd, environment = self.job_command(case)
        log, gputop_log = self.fixtures / f"{case.name}.log", self.fixtures / f"{case.name}.gputop.log"
        record, snapshot = self.work / f"{case.name}.jsonl", self.fixtures / f"{case.name}.json"
        outcome: dict[str, Any] = {"command": " ".join(argv[1:] if case.kind == "nanogpt" else argv)}
        with log.open("w") as job_out:
            job = start(argv, cwd, job_out, subprocess.STDOUT, environment)
        try:
            watch_by = case_deadline - timing.watch_s - cases.watch_margin(self.cpu) - timing.fix_s
            steady_s = self.wait_steady(job, log, case, watch_by)
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
        base = self.remember(case, None, log, f"{case.name}'s run")
        if case.kind == "nanogpt" and (first := levers.iteration_seconds(log.read_text(errors="replace"), case.kind,
                                                                        0)):
            outcome["first_iter_s"] = first[0]  # a compiled job's first iteration holds its compile
        offered = levers.offered_levers(self.loaded[case.name])
        fix = cases.fix_to_run(case, offered[0]["lever"] if offered else None, self.cpu)
        if fix is not None:
            outcome["measurement"] = self.measure_fix(case, fix, base, case_deadline)
        else:
            why = ("gputop offered no lever" if not offered else
                   f"the check cannot pull {offered[0]['lever']} itself")
            outcome["measurement"] = {"lever": None, "base_s": base["seconds"], "note": why}
        return outcome | {"status": "ok"}

    def summarise(self, selected: list[cases.Case]) -> dict[str, Any]:
        rows = [summary.probe_row(case, self.outcomes[case.name], self.loaded.get(case.name)) if case.kind == "probe"
                else summary.watched_row(case, self.outcomes[case.name], self.loaded.get(case.name), judge=not self.cpu)
                for case in selected]
        judged = [row["as_built"] for row in rows if row.get("as_built") is not None]
        levers_judged = [not row["lever_problems"] for row in rows if "lever_problems" in row]
        mode_note = ("Dry run on the CPU (--cpu): tiny shapes, short watches, compile off; the expected bottlenecks "
                     "and the levers built for are the GPU's, not judged here; an offered lever the job pulls and a "
                     "top lever's measured gain are." if self.cpu else "On the GPU.")
        return {"schema": "gputop.gpu_check/1", "date": self.date, "mode": "cpu" if self.cpu else "gpu",
                "gpu_label": self.gpu_label(),
                "mode_note": mode_note, "gputop_commit": os.environ.get("GPU_CHECK_COMMIT") or git_commit(),
                "machine": self.facts, "xl_batch": None if self.cpu else self.batch, "limit_s": self.limit_s,
                "wall_s": round(time.monotonic() - self.began, 1),
                "ok": sum(row["status"] == "ok" for row in rows),
                "as_built": f"{sum(judged)} of {len(judged)}" if judged else "none judged",
                "levers_hold": f"{sum(levers_judged)} of {len(levers_judged)}" if levers_judged else "none judged",
                "passed": sum(row.get("verdict") == "pass" for row in rows), "cases": rows}

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
    install = (not args.cpu) if args.install is None else args.install
    lines = preflight.preflight(cpu=args.cpu, nanogpt=args.nanogpt, nanogpt_files=NANOGPT_FILES, site=args.site,
                                wheels=args.wheels, install=install)
    print("\n".join(f"gpu_check: preflight: {line}" for line in lines), flush=True)
    check = Check(args)
    check.facts["preflight"] = lines
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
    print("\n".join((summary.TABLE_HEAD, *summary.table_rows(document["gpu_label"], document["cases"],
                                                                       document["date"]))), flush=True)
    print(f"gpu_check: {args.out}/fixtures.tar.gz, summary.json, summary.md ({document['wall_s']:.0f} s)", flush=True)
    return 0 if document["ok"] == len(selected) and document["passed"] == len(selected) else 1


if __name__ == "__main__":
    sys.exit(main())
