"""gputop compare: probes/compare.py on constructed snapshots and logs (the seed case of issue 18: two nanoGPT
runs with the same tokens per iteration, the wider one slower per token though its MFU is higher), a recording
folded as replay folds it, and the command line (text, --json, bad input is one line and exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from probes.compare import CompareError, compare_runs, load_run, parse_settings, render_text
from probes.models.gpt2 import FAMILY, GptShape

REPO = Path(__file__).resolve().parents[2]
RECORDINGS = REPO / "tests" / "fixtures" / "recordings"


def nanogpt_snapshot(seconds_per_iter: float, mfu_pct: float, batch: int, accumulation: int, n_embd: int,
                     n_head: int, **extra) -> dict:
    """A snapshot of nanoGPT on a 12 GB card, its shape on its command line (configurator.py's --key=value)."""
    return {
        "schema": "gputop.snapshot/1",
        "target": {"pid": 4242, "cmdline": ["python", "train.py", "config/train_gpt2.py", f"--batch_size={batch}",
                                            f"--gradient_accumulation_steps={accumulation}", f"--n_embd={n_embd}",
                                            f"--n_head={n_head}", "--n_layer=12", "--block_size=1024"]},
        "progress": {"seconds_per_iter": seconds_per_iter, "reported_mfu_pct": mfu_pct, "tokens_per_s": None,
                     "baseline": None},
        "gpus": {"available": True, "devices": [{"name": "NVIDIA GeForce RTX 3060", "sm_clock_mhz": 1777,
                                                 "power_w": 168.0, "in_target": True}]},
        "verdict": {"bottleneck": "gpu_bound", "liveness": "progressing", "confidence": 0.9, "evidence": [],
                    "advice": []},
        **extra,
    }


@pytest.fixture
def seed_case(tmp_path):
    small, wide = tmp_path / "embd384.json", tmp_path / "embd768.json"
    small.write_text(json.dumps(nanogpt_snapshot(3.9, 12.9, 16, 32, 384, 6)))
    wide.write_text(json.dumps(nanogpt_snapshot(9.3, 15.4, 8, 64, 768, 12)))
    return small, wide


def test_the_wider_model_is_slower_per_token_though_its_mfu_is_higher(seed_case):
    small, wide = (load_run(str(path), label) for path, label in zip(seed_case, ("A", "B"), strict=True))
    assert small.tokens_per_iter == wide.tokens_per_iter == 524_288
    assert small.tokens_per_s == pytest.approx(134_433, rel=1e-3)
    assert wide.tokens_per_s == pytest.approx(56_375, rel=1e-3)
    # FLOPs per token from the GPT-2 family's own count, for each side's shape
    assert small.flops_per_token == FAMILY.flops_per_token(GptShape(12, 6, 384, 1024, 50304))
    assert wide.flops_per_token / small.flops_per_token == pytest.approx(2.85, abs=0.05)
    comparison = compare_runs(small, wide)
    headline = comparison.verdict[0]
    assert headline == ("B is 2.4× slower per token than A (tokens/s 134k → 56.4k) though its MFU is higher "
                        "(12.9% → 15.4%): each of its tokens costs 2.8× the FLOPs (n_embd 384 → 768)")
    assert comparison.verdict[1] == ("both train 524,288 tokens per iteration, split differently: batch_size 16 → 8, "
                                     "gradient_accumulation_steps 32 → 64")
    assert {key for key, _, _ in comparison.config_differences} == {"batch_size", "gradient_accumulation_steps",
                                                                    "n_embd", "n_head"}


def test_the_text_puts_the_runs_side_by_side(seed_case):
    text = render_text(compare_runs(*(load_run(str(p), label) for p, label in zip(seed_case, ("384", "768"),
                                                                                    strict=True))))
    lines = text.splitlines()
    assert lines[0].split() == ["384", "768"]
    row = {line.split("  ")[0]: line.split() for line in lines if line.strip()}
    assert row["s/iter"][1:] == ["3.9", "9.3"]
    assert row["tokens/s"][1:] == ["134k", "56.4k"]
    assert "12.9%" in row["MFU"] and "15.4%" in row["MFU"]
    assert row["SM clock"][2:] == ["1777", "MHz", "1777", "MHz"]
    assert row["power"][1:] == ["168", "W", "168", "W"]
    assert "768 is 2.4× slower per token than 384" in text


def test_flags_state_what_the_inputs_do_not(tmp_path):
    bare = {key: value for key, value in nanogpt_snapshot(2.0, 10.0, 1, 1, 64, 1).items() if key != "target"}
    path = tmp_path / "bare.json"
    path.write_text(json.dumps(bare))
    run = load_run(str(path), "A", tokens_per_iter=1000, config=parse_settings(["n_layer=2", "n_embd=64",
                                                                                 "block_size=32", "compile=False"]))
    assert (run.tokens_per_iter, run.tokens_per_iter_from, run.tokens_per_s) == (1000, "--tokens-per-iter", 500)
    assert run.config["compile"] is False
    assert run.shape == "2 layers, 1 heads, 64 embd, block 32, vocab 50304"
    with pytest.raises(CompareError, match="KEY=VALUE"):
        parse_settings(["n_layer"])


def test_a_run_without_tokens_is_compared_by_its_pace(tmp_path):
    paths = []
    for name, pace in (("before", 3.0), ("after", 1.5)):
        document = {key: value for key, value in nanogpt_snapshot(pace, 10.0, 1, 1, 64, 1).items() if key != "target"}
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(document))
    comparison = compare_runs(load_run(str(paths[0]), "before"), load_run(str(paths[1]), "after"))
    assert comparison.verdict[0] == "after is 2.0× faster per iteration than before (s/iter 3 → 1.5)"


def test_a_source_line_a_warning_quotes_is_no_setting(tmp_path):
    """Issue 38, item 12: torch's warnings quote their source line, `cpu = _conversion_method_template(...)`, which
    has the shape of a config line; compare read it as a setting ("cpu — → _conversion_method_template(device=…)")."""
    log = tmp_path / "train.log"
    log.write_text("Overriding: dataset = shakespeare_char\nbatch_size = 12\n"
                   "/opt/venv/lib/python3.11/site-packages/torch/_tensor.py:1443: UserWarning: deprecated\n"
                   '  cpu = _conversion_method_template(device=torch.device("cpu"))\n'
                   + "".join(f"iter {i}: loss 9.0, time 3000.00ms, mfu 12.5%\n" for i in range(6)))
    run = load_run(str(log), "A")
    assert run.config == {"dataset": "shakespeare_char", "batch_size": 12}


def test_a_nanogpt_log_gives_its_config_pace_and_printed_mfu(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("Overriding config with config/train_gpt2.py:\n"
                   "batch_size = 12  # micro-batch\nn_layer = 12\nn_embd = 768\nblock_size = 1024\n"
                   "Overriding: compile = False\n"
                   "tokens per iteration will be: 491,520\n"
                   "number of parameters: 123.59M\n"
                   + "".join(f"iter {i}: loss 9.0, time {9000 if i == 0 else 3000}.00ms, "
                             f"mfu {-100 if i < 5 else 12.5}%\n" for i in range(10)))
    run = load_run(str(log), "A")
    assert (run.kind, run.seconds_per_iter, run.tokens_per_iter) == ("log", 3.0, 491_520)
    assert run.tokens_per_iter_from == "the log's tokens per iteration"
    # nanoGPT divides by an A100's peak whatever the GPU: said beside its figure, so 164% never stands unexplained
    assert (run.mfu_pct, run.mfu_from) == (12.5, "as the job printed it, against an A100's 312 TFLOP/s")
    assert run.config == {"batch_size": 12, "n_layer": 12, "n_embd": 768, "block_size": 1024, "compile": False}
    assert run.flops_per_token == FAMILY.flops_per_token(GptShape(12, 1, 768, 1024, 50304))


def test_a_recording_is_folded_with_its_main_thread_time_shares():
    run = load_run(str(RECORDINGS / "data_bound.jsonl"), "A")
    assert run.kind == "recording"
    assert run.bottleneck == "data_bound"
    # the folded snapshot's time_shares ("data") where this version's snapshot carries them, else the recording's
    # main-thread activities summed here ("data_wait")
    assert run.time_shares and max(run.time_shares, key=run.time_shares.get) in ("data", "data_wait")
    assert sum(run.time_shares.values()) == pytest.approx(1.0)


@pytest.mark.parametrize("content, suffix, message", [
    (None, ".json", "no such file"),
    ('{"schema": "something/1"}', ".json", "not a gputop snapshot"),
    ("{not json", ".json", "not JSON"),
    ("hello\nworld\n", ".log", "no step lines"),
    ("not a recording\n", ".jsonl", "not a gputop recording"),
])
def test_bad_input_is_one_error(tmp_path, content, suffix, message):
    path = tmp_path / f"input{suffix}"
    if content is not None:
        path.write_text(content)
    with pytest.raises(CompareError, match=message):
        load_run(str(path), "A")


def gputop(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tui", *args], capture_output=True, text=True, timeout=60, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), check=False)


@pytest.fixture
def fix_compared(tmp_path):
    """compare_runs of two snapshots of one nanoGPT run, before and after a fix. Each side is (label, s/iter,
    bottleneck, main-thread time shares[, the verdict's max_speedup])."""
    def compare(*sides):
        runs = []
        for label, pace, bottleneck, shares, *bound in sides:
            document = nanogpt_snapshot(pace, 10.0, 1, 1, 64, 1, time_shares=shares)
            document["verdict"]["bottleneck"] = bottleneck
            if bound:
                document["verdict"]["max_speedup"] = bound[0]
            path = tmp_path / f"{label}.json"
            path.write_text(json.dumps(document))
            runs.append(load_run(str(path), label))
        return compare_runs(*runs)

    return compare


def test_a_fix_is_checked_against_what_it_could_win(fix_compared):
    comparison = fix_compared(("before", 1.0, "data_bound", {"data_wait": 0.6, "compute": 0.4}),
                              ("after", 0.45, "cpu_bound", {"compute": 1.0}))
    assert comparison.verdict[1:5] == (
        "the bottleneck moved: data_bound → cpu_bound",
        "before's data_bound held its main thread 60% of the time: its fix could win up to 2.5× per iteration; "
        "after got 2.2×",
        "the main thread's compute share: 40% → 100%",
        "the main thread's data wait share: 60% → 0%",
    )


def test_a_run_without_a_pace_still_shows_what_changed():
    run = load_run(str(RECORDINGS / "data_bound.jsonl"), "before")
    comparison = compare_runs(run, run)
    assert comparison.verdict[0].startswith("no pace for before")


def test_a_bottleneck_in_every_sample_sets_no_limit(fix_compared):
    comparison = fix_compared(("before", 1.0, "data_bound", {"data_wait": 1.0}),
                              ("after", 0.25, "cpu_bound", {"compute": 1.0}))
    assert comparison.verdict[2] == ("before's data_bound held its main thread in every sample, so no limit to what "
                                     "its fix could win shows; after got 4.0× per iteration")


def test_a_snapshots_own_shares_and_bound_are_used(fix_compared):
    """A snapshot that carries time_shares (phase names of probes/diagnosis/shares.py) and verdict.max_speedup."""
    comparison = fix_compared(("before", 1.0, "data_bound", {"data": 0.6, "compute": 0.4}, 2.5),
                              ("after", 0.5, "gpu_bound", {"compute": 0.97, "logging": 0.03}, None))
    before, after = comparison.a, comparison.b
    assert (before.time_shares, before.max_speedup, after.max_speedup) == ({"data": 0.6, "compute": 0.4}, 2.5, None)
    assert comparison.verdict[2] == "before's verdict (data_bound) said its fix could win up to 2.5× per iteration; " \
                                    "after got 2.0×"
    assert "the main thread's data share: 60% → 0%" in comparison.verdict


def test_a_gain_beyond_the_bound_says_more_than_the_fix_changed(fix_compared):
    comparison = fix_compared(("starved", 0.133, "data_bound", {"data_wait": 0.72, "compute": 0.28}),
                              ("fixed", 0.0197, "cpu_bound", {"compute": 1.0}))
    assert comparison.verdict[2] == (
        "starved's data_bound held its main thread 72% of the time: its fix could win up to 3.6× per iteration; "
        "fixed got 6.8×, more than the bound: the rest of starved's step took 0.0372 s, fixed's whole step 0.0197 s, "
        "so more than the fix changed")
