"""nanoGPT's shape from its own command line (probes/models/nanogpt_config.py): a config file's literal
assignments, then --key=value overrides, as nanoGPT's configurator.py applies them; the vocabulary solved
from the "number of parameters" line; a real process's /proc command line; and the live comparison saying
where the shape came from."""

from __future__ import annotations

import pytest

from probes.models.gpt2 import GptShape, count_params
from probes.models.nanogpt_config import parameters_printed, read_command_line

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


def test_config_file_then_overrides(nanogpt_folder):
    argv = ["python", "train.py", "config/train_shakespeare_char.py", "--n_layer=4", "--device=cpu",
            "--compile=False"]
    stated = read_command_line(argv, str(nanogpt_folder))
    assert stated.shape == GptShape(n_layer=4, n_head=6, n_embd=384, block_size=256, vocab_size=50304)
    assert stated.tokens_per_iter == 1 * 64 * 256
    assert stated.source.startswith("nanoGPT's command line: config/train_shakespeare_char.py --n_layer=4 ")
    assert "vocab 50304 assumed" in stated.source


def test_the_parameters_line_gives_the_vocabulary(nanogpt_folder):
    shape = GptShape(n_layer=4, n_head=6, n_embd=384, block_size=256, vocab_size=65)
    log = f"tokens per iteration will be: 16,384\nnumber of parameters: {count_params(shape) / 1e6:.2f}M\n"
    assert parameters_printed(log) == round(count_params(shape), -4)
    stated = read_command_line(["python", "train.py", "config/train_shakespeare_char.py", "--n_layer=4"],
                               str(nanogpt_folder), log)
    assert stated.shape.vocab_size == pytest.approx(65, abs=26)  # the line is rounded to 0.01M = 10,000 / 384
    assert "vocab ≈75 from its 'number of parameters: 7.11M' line" in stated.source


def test_defaults_without_arguments_and_torchrun(nanogpt_folder):
    stated = read_command_line(["torchrun", "--standalone", "--nproc_per_node=8", "train.py"], str(nanogpt_folder))
    assert stated.shape == GptShape(12, 12, 768, 1024, 50304)
    assert stated.tokens_per_iter == 40 * 12 * 1024  # train.py's 491,520
    assert "train.py's defaults" in stated.source


def test_not_nanogpt(tmp_path):
    (tmp_path / "train.py").write_text("", encoding="utf-8")  # no configurator.py beside it
    assert read_command_line(["python", "train.py", "--n_layer=4"], str(tmp_path)) is None
    assert read_command_line(["python", "other.py"], str(tmp_path)) is None


def test_configurator_overrides_read_every_key_as_configurator_does():
    from probes.models.nanogpt_config import configurator_overrides

    argv = ["python", "train.py", "config/x.py", "--n_layer=4", "--dtype=bfloat16", "--compile=False",
            "--init_from='gpt2'", "--n_layer=6", "--verbose", "--not-a-key=1"]
    assert configurator_overrides(argv) == {"n_layer": 6, "dtype": "bfloat16", "compile": False, "init_from": "gpt2"}
