"""`gputop probe --like PID` on a real job: a small GPT configured and logging as nanoGPT's train.py
(tests/targets/nanogpt_config_train.py, run as train.py with a configurator.py beside it) at a tiny shape. The probe
times its step at the job's shape, micro-batch, block and accumulation, each with where it was read; what the job does
not state (this train.py sets no dtype, compile or bias) stops it with one line until the flags are given; and with
NVML (tests/support/fake_pynvml.py) listing the job on GPU 0 it refuses to run there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.cli import assert_one_line_usage_error, gputop
from support.paths import REPO
from support.processes import stop_process_tree, wait_for
from support.real_jobs import start_nanogpt_like

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SETTINGS = ("--n_layer=1", "--n_head=2", "--n_embd=16", "--vocab_size=64", "--block_size=16", "--batch_size=2",
            "--gradient_accumulation_steps=3")
NOT_STATED = ("--dtype", "fp32", "--no-compile", "--no-bias")  # what this train.py does not set
# gputop's command with the fake NVML in place of pynvml: two GPUs, the job's PID (argv[1]) on the first.
WITH_FAKE_NVML = """
import sys
sys.path.insert(0, "tests")
import pynvml  # the real module first: the fake re-exports its constants
from support.fake_pynvml import GIB, FakeGpu, FakeNvml
job = int(sys.argv[1])
sys.modules["pynvml"] = FakeNvml([FakeGpu(processes=[(job, 2 * GIB)]),
                                  FakeGpu(uuid="GPU-11111111-1111-1111-1111-111111111111")])
from tui.cli import main
main(sys.argv[2:])
"""


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    proc, log = start_nanogpt_like(tmp_path_factory.mktemp("nanogpt"), SETTINGS)
    try:
        wait_for(lambda: "tokens per iteration will be" in log.read_text(), timeout=120)
        yield proc.pid
    finally:
        stop_process_tree(proc)


def without_gpu_settings() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if key != "CUDA_VISIBLE_DEVICES"}


def test_the_reference_step_at_the_jobs_own_settings(job):
    done = gputop("probe", "--like", str(job), "--steps", "2", "--warmup", "1", *NOT_STATED, "--json", timeout=240)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["shape"] == {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16, "vocab_size": 64,
                               "bias": False}
    assert (result["batch_size"], result["grad_accum"], result["tokens_per_iter"]) == (2, 3, 2 * 16 * 3)
    assert result["dtype"] == "fp32" and result["compiled"] is False and result["model"] == "nanoGPT"
    like = result["like"]
    assert like["pid"] == job and like["reader"] == "nanoGPT's train.py"
    assert like["given"] == ["--no-bias", "--dtype fp32", "--no-compile"]
    sources = {s["name"]: s["source"] for s in like["settings"]}
    assert sources["batch_size"] == "--batch_size=2 on its command line"
    assert sources["grad_accum"] == "--gradient_accumulation_steps=3 on its command line"
    assert sources["block_size"] == "--block_size=16 on its command line"
    assert sources["n_embd"] == "--n_embd=16 on its command line"
    assert sources["dtype"] == ("--dtype fp32 given (the job's: not read: dtype is not set in train.py, a config file "
                                "or an override)")
    # said before the run, in the same words
    before = done.stderr.split("gputop probe: building")[0]
    assert f"gputop probe: like PID {job} (python train.py --n_layer=1" in before
    assert "gputop probe:   batch_size  2        --batch_size=2 on its command line" in before.splitlines()


def test_what_the_job_does_not_state_is_asked_for(job):
    done = gputop("probe", "--like", str(job), "--steps", "1", "--warmup", "1")
    assert_one_line_usage_error(done, f"cannot time PID {job}'s step at its own settings: bias is not set in train.py",
                                "Pass --bias or --no-bias, --dtype, --compile or --no-compile")


def test_a_gpu_the_job_runs_on_is_refused(job):
    done = subprocess.run([sys.executable, "-c", WITH_FAKE_NVML, str(job), "probe", "--like", str(job), *NOT_STATED],
                          capture_output=True, text=True, timeout=120, cwd=REPO,
                          env=dict(without_gpu_settings(), PYTHONPATH=str(REPO)))
    assert_one_line_usage_error(done)
    assert done.stderr.strip() == (f"gputop: GPU 0 is running PID {job} (the job): a reference timed beside it "
                                   "measures neither; stop the job or pass CUDA_VISIBLE_DEVICES=1")
