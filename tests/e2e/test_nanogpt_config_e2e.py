"""nanoGPT's shape from its own command line (probes/models/nanogpt_config.py): a config file's literal
assignments, then --key=value overrides, as nanoGPT's configurator.py applies them; the vocabulary solved
from the "number of parameters" line; a real process's /proc command line; and the live comparison saying
where the shape came from."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.processes import wait_for

from probes.frame import ProgressReading
from probes.jobs.job_command_line import stated_model
from probes.models.gpt2 import GptShape
from probes.reference.baseline import compare_progress, load_comparison_inputs

# The shape of config/train_shakespeare_char.py in nanoGPT, with the issue's --n_layer=4 override.
CONFIG = """# train a miniature character-level shakespeare model
out_dir = 'out-shakespeare-char'
eval_interval = 250
gradient_accumulation_steps = 1
batch_size = 64
block_size = 256 # context of up to 256 previous characters
n_layer = 6
n_head = 6
n_embd = 384
dropout = 0.2
learning_rate = 1e-3
max_iters = 5000
lr_decay_iters = max_iters  # an expression: not followed, and nothing it sets matters for the shape
"""


@pytest.fixture
def nanogpt_folder(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "train_shakespeare_char.py").write_text(CONFIG, encoding="utf-8")
    (tmp_path / "train.py").write_text("import time\ntime.sleep(600)\n", encoding="utf-8")  # a stand-in
    (tmp_path / "configurator.py").write_text("", encoding="utf-8")
    return tmp_path


@pytest.mark.slow
def test_a_running_job_states_its_shape_and_the_pace_says_where_from(nanogpt_folder, tmp_path):
    log = tmp_path / "train.log"
    log.write_text("number of parameters: 7.10M\n", encoding="utf-8")
    with log.open("a") as stdout:
        job = subprocess.Popen([sys.executable, "train.py", "config/train_shakespeare_char.py", "--n_layer=4",
                                "--batch_size=8"], cwd=nanogpt_folder, stdout=stdout)
    try:
        # until the child has exec'd train.py, /proc shows the parent's command line
        stated = wait_for(lambda: stated_model(job.pid, None))  # the log found as its stdout
    finally:
        job.kill()
        job.wait()
    assert stated.shape.n_layer == 4 and stated.tokens_per_iter == 8 * 256
    inputs = load_comparison_inputs(None, None, None, stated=stated)
    reading = ProgressReading(source=str(log), format="nanogpt", iteration=9, seconds_per_iter=0.5,
                              last_line="iter 9: loss 2.0, time 500.00ms, mfu 0.01%")
    lines = compare_progress(reading, inputs, None).lines
    assert "4,096 tokens/s (2,048 tokens per iteration, gradient_accumulation_steps × batch_size × block_size " \
           "on its command line)." in lines
    assert lines[-1].startswith("Model from nanoGPT's command line: config/train_shakespeare_char.py --n_layer=4 "
                                "--batch_size=8 (vocab ")


@pytest.mark.slow
def test_attach_without_model_takes_the_shape_the_job_states(nanogpt_folder):
    from tui.cli import build_parser
    from tui.commands.shared import comparison_inputs

    job = subprocess.Popen([sys.executable, "train.py", "--n_layer=2", "--n_embd=128", "--n_head=4"],
                           cwd=nanogpt_folder, stdout=subprocess.DEVNULL)
    try:
        stated = wait_for(lambda: comparison_inputs(build_parser().parse_args(["--pid", str(job.pid)])))
        given = comparison_inputs(build_parser().parse_args(["--pid", str(job.pid), "--model", "gpt2"]))
    finally:
        job.kill()
        job.wait()
    assert stated.shape == GptShape(2, 4, 128, 1024, 50304)
    assert stated.stated_by.startswith("nanoGPT's command line: --n_layer=2 --n_embd=128 --n_head=4")
    assert given.stated_by is None and given.model == "gpt2"  # --model wins over what the job states
