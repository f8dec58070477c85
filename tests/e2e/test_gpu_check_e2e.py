"""The prepared GPU check (benchmarks/gpu_check.py, docs/benchmarks.md "The GPU check"): its budgets fit the 8
minutes, each case is built to be a bottleneck gputop names, gputop reads the nanoGPT configs it writes as the shape
it means, the checkpointing patch really checkpoints, the summary of a real H200 run says what that run's files
say, and (slow) the whole pipeline runs end to end on the CPU with tiny shapes.

No GPU here: the GPU run itself is one `device` call, described in docs/benchmarks.md."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from support.paths import REPO

from probes.frame import BOTTLENECKS

sys.path.insert(0, str(REPO / "benchmarks"))
import gpu_check
import gpu_check_cases as cases

BY_NAME = {case.name: case for case in cases.CASES}
H100_BYTES, H200_BYTES = 80 * 2**30, 141 * 2**30


@pytest.mark.slow
@pytest.mark.timeout(900)  # a bound on a broken run only: the check runs each case to its own end (--no-deadlines)
def test_the_dry_run_runs_every_case_end_to_end_on_the_cpu(tmp_path):
    """`gpu_check.py --cpu`: real gputop on real jobs (nanoGPT's own train.py where benchmarks/fetch_nanogpt.sh put
    it, else those cases fail, saying so, and the check goes on), every file packed, the summary written."""
    out = tmp_path / "out"
    # No deadlines: the budgets are the lent GPU's minutes, and this machine may be running many tests at once (a CI
    # run beside five other workers put the eager probe past its 61 s). What ran is judged, not how fast; the
    # budgets' sums are checked in tests/unit/test_gpu_check.py.
    finished = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "--cpu", "--out", str(out),
                               "--work", str(tmp_path / "work"), "--no-deadlines"], capture_output=True, text=True)
    assert finished.returncode in (0, 1), finished.stderr[-3000:]
    document = json.loads((out / "summary.json").read_text())
    assert document["mode"] == "cpu"
    have_nanogpt = (gpu_check.NANOGPT / "train.py").is_file()
    rows = {row["case"]: row for row in document["cases"]}
    assert list(rows) == list(cases.CASE_NAMES)
    for name, row in rows.items():
        if BY_NAME[name].kind == "nanogpt" and not have_nanogpt:
            assert row["status"] == "failed" and "fetch_nanogpt.sh" in row["reason"], row
        else:
            assert row["status"] == "ok", (name, row.get("reason"), finished.stdout[-3000:])
    assert finished.returncode == (0 if have_nanogpt else 1)
    assert document["as_built"] == "none judged"

    with tarfile.open(out / "fixtures.tar.gz") as archive:
        names = {Path(member.name).name: member for member in archive.getmembers()}
        for name, row in rows.items():
            if row["status"] != "ok":
                continue
            assert f"{name}.json" in names and f"{name}.log" in names, name
            if BY_NAME[name].kind != "probe":
                packed = archive.extractfile(names[f"{name}.jsonl.gz"]).read()
                header = json.loads(gzip.decompress(packed).decode().partition("\n")[0])
                assert header["schema"] == "gputop.recording/1", name
                assert row["bottleneck"] in BOTTLENECKS and row["evidence"], name
        assert "summary.md" in names and "summary.json" in names
    text = (out / "summary.md").read_text()
    assert all(f"| CPU (dry run) | {name} |" in text for name in cases.CASE_NAMES)
