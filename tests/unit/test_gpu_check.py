"""The prepared GPU check (benchmarks/gpu_check.py, docs/benchmarks.md "The GPU check"): its budgets fit the 8
minutes, each case is built to be a bottleneck gputop names, gputop reads the nanoGPT configs it writes as the shape
it means, the checkpointing patch really checkpoints, the summary of a real H200 run says what that run's files
say, and (slow) the whole pipeline runs end to end on the CPU with tiny shapes.

No GPU here: the GPU run itself is one `device` call, described in docs/benchmarks.md."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pynvml
import pytest
from support.fake_pynvml import GIB, FakeGpu, FakeNvml
from support.h200 import fixture
from support.paths import REPO

from probes.frame import BOTTLENECKS
from probes.models.nanogpt_config import read_command_line

# The check itself is a torch program (its cases run tiny training loops): without torch it has nothing to check.
torch = pytest.importorskip("torch", reason="torch is not installed (the probe extra)")
sys.path.insert(0, str(REPO / "benchmarks"))
import gpu_check  # noqa: E402 (after the skip without torch: the check imports it)
import gpu_check_cases as cases  # noqa: E402
import gpu_check_summary as summary  # noqa: E402

BY_NAME = {case.name: case for case in cases.CASES}
H100_BYTES, H200_BYTES = 80 * 2**30, 141 * 2**30


def test_the_budgets_fit_under_eight_minutes_and_the_dry_run_under_five():
    assert cases.TOTAL_LIMIT_S == 8 * 60
    assert cases.budget_total(cpu=False) <= cases.TOTAL_LIMIT_S
    assert cases.budget_total(cpu=True) <= cases.CPU_TOTAL_LIMIT_S <= 300
    assert cases.budget_problem(cpu=False) is None and cases.budget_problem(cpu=True) is None


def test_a_budget_over_the_limit_or_a_watch_longer_than_its_case_is_refused(monkeypatch):
    longer = [dataclasses.replace(case, gpu=cases.Timing(case.gpu.budget_s + 60, case.gpu.watch_s))
              if case.name == "xl_compiled" else case for case in cases.CASES]
    monkeypatch.setattr(cases, "CASES", tuple(longer))
    assert "over the 480 s limit" in cases.budget_problem(cpu=False)
    assert gpu_check.main(["--out", "/nonexistent/never-written"]) == 2  # refused before it starts anything

    cramped = [dataclasses.replace(case, cpu=cases.Timing(case.cpu.budget_s, case.cpu.budget_s))
               if case.name == "launch_bound" else case for case in cases.CASES]
    monkeypatch.setattr(cases, "CASES", tuple(cramped))
    assert cases.budget_problem(cpu=True) == "launch_bound: watching 30 s leaves its job no time to start"


def test_each_canonical_case_is_built_to_be_a_bottleneck_gputop_names():
    assert set(BY_NAME) == {"probe_eager", "probe_compiled", "xl_compiled", "xl_eager_fp32", "xl_checkpointed",
                            "launch_bound", "data_starved"}
    for case in cases.CASES:
        assert set(case.expected) <= set(BOTTLENECKS), case.name
        assert (case.kind == "probe") == (case.expected == ()), case.name
        if case.baseline:
            assert BY_NAME[case.baseline].kind == "probe"
            assert cases.CASES.index(BY_NAME[case.baseline]) < cases.CASES.index(case)  # measured before it is used
    assert BY_NAME["launch_bound"].expected == ("cpu_bound",)
    assert BY_NAME["data_starved"].expected == ("data_bound",)


def nanogpt_folder(tmp_path: Path, case: cases.Case, gpu_bytes: int | None, cpu: bool = False) -> list[str]:
    """A folder laid out as the check lays out nanoGPT's (train.py and configurator.py beside config/), with the
    case's config written; the job's command line."""
    (tmp_path / "config").mkdir(exist_ok=True)
    for name in ("train.py", "configurator.py"):
        (tmp_path / name).write_text("# nanoGPT's file\n")
    settings = cases.nanogpt_settings(case, cpu=cpu, batch=cases.xl_batch(gpu_bytes))
    (tmp_path / f"config/gpu_check_{case.name}.py").write_text(cases.nanogpt_config(case, settings))
    return ["python3", "train.py", f"config/gpu_check_{case.name}.py"]


@pytest.mark.parametrize("gpu_bytes", [H100_BYTES, H200_BYTES])
def test_gputop_reads_each_nanogpt_config_as_gpt2_xl_at_its_tokens_per_iteration(tmp_path, gpu_bytes):
    tokens = {"xl_compiled": 131_072, "xl_eager_fp32": 16_384,
              "xl_checkpointed": 16_384 if gpu_bytes == H100_BYTES else 32_768}
    for name, expected_tokens in tokens.items():
        stated = read_command_line(nanogpt_folder(tmp_path, BY_NAME[name], gpu_bytes), str(tmp_path))
        assert stated is not None, name
        assert (stated.shape.n_layer, stated.shape.n_head, stated.shape.n_embd, stated.shape.block_size) == \
            (48, 25, 1600, 1024), name
        assert stated.tokens_per_iter == expected_tokens, name


def test_the_configs_compile_and_cast_as_each_case_says():
    settings = {name: cases.nanogpt_settings(BY_NAME[name], cpu=False, batch=16)
                for name in ("xl_compiled", "xl_eager_fp32", "xl_checkpointed")}
    assert (settings["xl_compiled"]["compile"], settings["xl_compiled"]["dtype"]) == (True, "bfloat16")
    assert (settings["xl_eager_fp32"]["compile"], settings["xl_eager_fp32"]["dtype"]) == (False, "float32")
    assert (settings["xl_checkpointed"]["compile"], settings["xl_checkpointed"]["dtype"]) == (False, "bfloat16")
    assert all(s["eval_iters"] == 0 and s["dataset"] == "synthetic" for s in settings.values())
    assert cases.nanogpt_settings(BY_NAME["xl_compiled"], cpu=True, batch=16)["device"] == "cpu"
    assert cases.probe_arguments(BY_NAME["probe_compiled"], cpu=False, batch=8) == \
        ["--model", "gpt2-xl", "--batch-size", "8", "--compile", "--json"]
    assert "--no-compile" in cases.probe_arguments(BY_NAME["probe_eager"], cpu=False, batch=16)


def test_the_checkpointing_patch_runs_each_block_under_torch_utils_checkpoint(monkeypatch):
    """The patch as configurator.py runs it: exec'd in train.py's globals once `from model import ...` has
    imported nanoGPT's model module; Block.forward then goes through torch.utils.checkpoint, and the gradient
    is the plain forward's."""

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, x):
            return x + torch.tanh(self.linear(x))

    model_module = type(sys)("model")
    model_module.Block = Block
    monkeypatch.setitem(sys.modules, "model", model_module)
    calls = []
    real_checkpoint = torch.utils.checkpoint.checkpoint
    monkeypatch.setattr(torch.utils.checkpoint, "checkpoint",
                        lambda *args, **kwargs: calls.append(kwargs) or real_checkpoint(*args, **kwargs))
    block = Block()
    x = torch.randn(3, 4, requires_grad=True)
    plain = torch.autograd.grad(block(x).sum(), x)[0]

    exec(cases.CHECKPOINT_PATCH, {})
    patched = torch.autograd.grad(block(x).sum(), x)[0]
    assert calls == [{"use_reentrant": False}]
    assert torch.allclose(plain, patched)


def h200_rows() -> list[dict]:
    """The summary's rows for the H200 fixtures' run: its steady-state snapshot as xl_compiled, its probes."""
    snapshot = json.loads(fixture("gpt2xl_s2.json").read_text())
    rows = [summary.probe_row(BY_NAME[name], {"status": "ok", "wall_s": 80.0}, json.loads(fixture(file).read_text()))
            for name, file in (("probe_eager", "gpt2xl_probe.json"), ("probe_compiled", "gpt2xl_probe_compile.json"))]
    rows.append(summary.watched_row(BY_NAME["xl_compiled"], {"status": "ok", "wall_s": 150.0, "steady": True,
                                                             "steady_after_s": 110.0, "watched_s": 40.0}, snapshot))
    rows.append(summary.watched_row(BY_NAME["launch_bound"], {"status": "failed", "reason": "the job exited (1)"},
                                    None))
    return rows


def test_the_summary_of_the_h200_run_says_what_its_files_say():
    eager, compiled, job, failed = h200_rows()
    assert job["bottleneck"] == "gpu_throttled" and job["as_built"] is True
    assert job["mfu_pct"] == pytest.approx(53.1, abs=0.05)
    assert job["evidence"][0] == ("GPU 0: util 100%, SM clock 1662/1980 MHz, power 692/700 W, SM active 95%, "
                                  "tensor active 64%")
    assert summary.figures(job) == "2.56 s/iter · MFU 53% · util 100%, SM active 95%, tensor active 64% · 693/700 W"
    assert summary.figures(compiled) == "0.330 s/step · 49.8k tokens/s · MFU 52% · compile 60 s · peak 67.7 GiB"
    assert summary.figures(eager).startswith("0.357 s/step · 45.9k tokens/s · MFU 48%")
    assert "bottleneck" not in failed and summary.said(failed) == "failed: the job exited (1)"
    assert summary.table_rows("NVIDIA H200", [job, failed]) == [
        "| NVIDIA H200 | xl_compiled | nanoGPT train.py, GPT-2 XL, compiled, bf16 | gpu_bound or gpu_throttled | "
        "gpu_throttled (progressing) | 2.56 s/iter · MFU 53% · util 100%, SM active 95%, tensor active 64% · "
        "693/700 W | yes |",
        "| NVIDIA H200 | launch_bound | tiny deep MLP, batch 1: launch-bound | cpu_bound | failed: the job exited (1) "
        "| – | – |"]


def test_the_summary_names_the_reference_rate_where_gputop_measured_one():
    row = summary.watched_row(BY_NAME["xl_compiled"], {"status": "ok"}, {
        "verdict": {"bottleneck": "gpu_bound", "evidence": []},
        "progress": {"seconds_per_iter": 2.5, "baseline": {"compute_bound_pct": 97.7, "reference_compiled": True}}})
    assert summary.figures(row) == "2.5 s/iter · 98% of the compiled probe's rate"
    wrong = summary.watched_row(BY_NAME["data_starved"], {"status": "ok"}, {"verdict": {"bottleneck": "gpu_bound"}})
    assert wrong["as_built"] is False and summary.as_built(wrong) == "**no**"
    dry_run = summary.watched_row(BY_NAME["data_starved"], {"status": "ok"}, {"verdict": {"bottleneck": "cpu_bound"}},
                                  judge=False)  # on the CPU a case is not what it was built to be on the GPU
    assert dry_run["as_built"] is None and summary.as_built(dry_run) == "–"


def test_the_markdown_holds_the_table_and_each_case():
    document = {"date": "2026-11-27", "gpu_label": "NVIDIA H200", "mode_note": "On the GPU.", "gputop_commit": "abc",
                "machine": {"gpu_name": "NVIDIA H200", "gpu_memory_bytes": 150_754_820_096, "driver": "580.159.04",
                            "power_limit_w": 700, "nanogpt_commit": "3adf61e", "torch": "2.11.0+cu130",
                            "python": "3.12.3", "cpus": 16, "py_spy": "0.4.3"},
                "xl_batch": 16, "wall_s": 401.0, "limit_s": 480.0, "ok": 3, "as_built": "1 of 1", "cases": h200_rows()}
    text = summary.markdown(document)
    assert text.startswith("# The GPU check on NVIDIA H200, 2026-11-27\n")
    assert "GPU: NVIDIA H200, 140 GiB, driver 580.159.04, power limit 700 W; GPT-2 XL batch 16." in text
    assert summary.TABLE_HEAD in text and "\n## xl_compiled\n" in text
    assert "- evidence: SM clock held at 84% of max by: software power cap\n" in text


def test_the_command_line_takes_a_subset_of_cases_and_refuses_an_unknown_one():
    args = gpu_check.parse_args(["--cpu", "--cases", "probe_eager,data_starved", "--out", "/tmp/x"])
    assert args.cpu and args.cases == "probe_eager,data_starved"
    with pytest.raises(SystemExit):
        gpu_check.parse_args(["--cases", "probe_eager,nope"])


def test_the_machine_record_reads_the_gpus_through_the_nvml_sensor():
    """GPU 0's name, memory and power limit, the count, the driver and who holds GPU 0, as probes/sensors/nvml.py
    reads them (the fake has pynvml's calls and errors); NVML shut down after."""
    fake = FakeNvml([FakeGpu(processes=[(4242, 70 * GIB), (5151, None)]), FakeGpu(name="NVIDIA H100 80GB HBM3")],
                    driver_version="580.159.04")
    assert gpu_check.gpu_facts(fake) == {
        "gpu_name": "NVIDIA H200", "gpu_memory_bytes": 143_771 * 2**20, "gpu_count": 2, "driver": "580.159.04",
        "power_limit_w": 700, "power_max_limit_w": 700, "gpu_processes_at_start": [4242, 5151]}
    assert fake.init_count == 0
    assert gpu_check.gpu_processes(fake) == [4242, 5151] and fake.init_count == 0


def test_a_field_the_gpu_does_not_give_is_none_and_no_gpu_is_a_reason():
    no_limit = FakeNvml([FakeGpu(errors={"nvmlDeviceGetEnforcedPowerLimit": pynvml.NVML_ERROR_NOT_SUPPORTED})])
    facts = gpu_check.gpu_facts(no_limit)
    assert facts["gpu_name"] == "NVIDIA H200" and facts["power_limit_w"] is None
    assert facts["gpu_processes_at_start"] == []
    no_maximum = FakeNvml([FakeGpu(power_max_limit_mw=None)])  # the constraints not supported: no maximum read
    assert gpu_check.gpu_facts(no_maximum)["power_max_limit_w"] is None

    no_driver = FakeNvml([FakeGpu()], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    facts = gpu_check.gpu_facts(no_driver)
    assert "gpu_name" not in facts and facts["gpu_reason"].startswith("NVML: NVIDIA driver not loaded")
    assert gpu_check.gpu_processes(no_driver) is None

    no_name = FakeNvml([FakeGpu(errors={"nvmlDeviceGetName": pynvml.NVML_ERROR_UNKNOWN})])
    facts = gpu_check.gpu_facts(no_name)
    assert "gpu_name" not in facts and "name" in facts["gpu_reason"]
