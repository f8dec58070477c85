"""The prepared GPU check (benchmarks/gpu_check.py, docs/benchmarks.md "The GPU check"): its budgets fit one call of
the `device` tool, each case is built to be a bottleneck gputop names and a lever it should offer, gputop reads the
nanoGPT configs it writes as the shape it means, the checkpointing patch really checkpoints and the TF32 patch keeps
TF32 off, a lever's fix is the same job with one setting changed, the levers' gains are read and judged as they
state them, the preflight lists and installs what is missing, the vendored nanoGPT is the pinned commit's, and the
summary of a real H200 run says what that run's files say. The dry run end to end is tests/e2e/test_gpu_check_e2e.py.

No GPU here: the GPU run itself is one `device` call, described in docs/benchmarks.md."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path

import pynvml
import pytest
from support.fake_pynvml import GIB, FakeGpu, FakeNvml
from support.h200 import fixture
from support.paths import REPO

from probes.diagnosis.levers import LEVERS
from probes.frame import BOTTLENECKS
from probes.models.gpt2 import PRESETS as GPT_PRESETS
from probes.models.nanogpt_config import read_command_line

# The check itself is a torch program (its cases run tiny training loops): without torch it has nothing to check.
torch = pytest.importorskip("torch", reason="torch is not installed (the probe extra)")
sys.path.insert(0, str(REPO / "benchmarks"))
import gpu_check  # noqa: E402 (after the skip without torch: the check imports it)
import gpu_check_cases as cases  # noqa: E402
import gpu_check_levers as levers  # noqa: E402
import gpu_check_preflight as preflight  # noqa: E402
import gpu_check_summary as summary  # noqa: E402

BY_NAME = {case.name: case for case in cases.CASES}
H100_BYTES, H200_BYTES = 80 * 2**30, 141 * 2**30


def test_the_budgets_fit_one_device_call_and_the_dry_run_under_six_minutes():
    assert cases.TOTAL_LIMIT_S + 25 <= cases.DEVICE_TIMEOUT_S <= 600  # the device tool's per-call limit
    assert cases.budget_total(cpu=False) <= cases.TOTAL_LIMIT_S
    assert cases.budget_total(cpu=True) <= cases.CPU_TOTAL_LIMIT_S <= 360
    assert cases.budget_problem(cpu=False) is None and cases.budget_problem(cpu=True) is None


def test_a_budget_over_the_limit_or_a_watch_longer_than_its_case_is_refused(monkeypatch):
    longer = [dataclasses.replace(case, gpu=cases.Timing(case.gpu.budget_s + 60, case.gpu.watch_s))
              if case.name == "xl_compiled" else case for case in cases.CASES]
    monkeypatch.setattr(cases, "CASES", tuple(longer))
    assert "over the 560 s limit" in cases.budget_problem(cpu=False)
    assert gpu_check.main(["--out", "/nonexistent/never-written"]) == 2  # refused before it starts anything

    cramped = [dataclasses.replace(case, cpu=cases.Timing(case.cpu.budget_s, case.cpu.budget_s))
               if case.name == "launch_bound" else case for case in cases.CASES]
    monkeypatch.setattr(cases, "CASES", tuple(cramped))
    assert cases.budget_problem(cpu=True) == "launch_bound: watching 30 s leaves its job no time to start"


def test_each_canonical_case_is_built_to_be_a_bottleneck_gputop_names():
    assert set(BY_NAME) == {"probe_eager", "probe_compiled", "xl_compiled", "xl_eager", "xl_checkpointed",
                            "xl_eager_tf32", "xl_eager_fp32", "launch_bound", "data_starved"}
    for case in cases.CASES:
        assert set(case.expected) <= set(BOTTLENECKS), case.name
        assert (case.kind == "probe") == (case.expected == ()), case.name
        if case.baseline:
            assert BY_NAME[case.baseline].kind == "probe"
            assert cases.CASES.index(BY_NAME[case.baseline]) < cases.CASES.index(case)  # measured before it is used
    assert BY_NAME["launch_bound"].expected == ("cpu_bound",)
    assert BY_NAME["data_starved"].expected == ("data_bound",)
    built_for = {case.name: case.lever for case in cases.CASES if case.lever}
    assert built_for == {"xl_eager": "compile", "xl_checkpointed": "drop_checkpointing",
                         "xl_eager_tf32": "bf16_autocast", "xl_eager_fp32": "bf16_autocast",
                         "launch_bound": "cuda_graphs"}
    for name, lever in built_for.items():  # each is a lever gputop has, and one the check can pull
        assert lever in {lever.name for lever in LEVERS} and lever in cases.FIXES[BY_NAME[name].kind], name
        assert lever not in cases.pulled_levers(BY_NAME[name], cpu=False), name  # the job does not pull it yet


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
    tokens = {"xl_compiled": 131_072, "xl_eager": 131_072, "xl_checkpointed": 131_072, "xl_eager_tf32": 16_384,
              "xl_eager_fp32": 16_384}
    for name, expected_tokens in tokens.items():
        stated = read_command_line(nanogpt_folder(tmp_path, BY_NAME[name], gpu_bytes), str(tmp_path))
        assert stated is not None, name
        assert (stated.shape.n_layer, stated.shape.n_head, stated.shape.n_embd, stated.shape.block_size) == \
            (48, 25, 1600, 1024), name
        assert stated.tokens_per_iter == expected_tokens, name


def test_the_configs_compile_and_cast_as_each_case_says():
    names = ("xl_compiled", "xl_eager", "xl_checkpointed", "xl_eager_tf32", "xl_eager_fp32")
    settings = {name: cases.nanogpt_settings(BY_NAME[name], cpu=False, batch=16) for name in names}
    assert (settings["xl_compiled"]["compile"], settings["xl_compiled"]["dtype"]) == (True, "bfloat16")
    assert (settings["xl_eager"]["compile"], settings["xl_eager"]["dtype"]) == (False, "bfloat16")
    assert (settings["xl_checkpointed"]["compile"], settings["xl_checkpointed"]["dtype"]) == (False, "bfloat16")
    for name in ("xl_eager_tf32", "xl_eager_fp32"):
        assert (settings[name]["compile"], settings[name]["dtype"], settings[name]["batch_size"]) == \
            (False, "float32", 4)
    jobs = {name: cases.nanogpt_job(BY_NAME[name], cpu=False, batch=16) for name in names}
    assert jobs["xl_eager_fp32"].patches == ("tf32_off",) and jobs["xl_eager_tf32"].patches == ()
    assert cases.job_environment(jobs["xl_eager_fp32"]) == {"NVIDIA_TF32_OVERRIDE": "0"}
    assert cases.job_environment(jobs["xl_eager_tf32"]) == {}
    config = cases.nanogpt_config(BY_NAME["xl_eager_fp32"], jobs["xl_eager_fp32"])
    assert config.index("_torch.backends.cuda.matmul.allow_tf32 = False") < config.index("dtype = 'float32'")
    assert all(s["eval_iters"] == 0 and s["dataset"] == "synthetic" for s in settings.values())
    assert cases.nanogpt_settings(BY_NAME["xl_compiled"], cpu=True, batch=16)["device"] == "cpu"
    assert cases.probe_arguments(BY_NAME["probe_compiled"], cpu=False, batch=8) == \
        ["--model", "gpt2-xl", "--batch-size", "8", "--compile", "--json"]
    assert "--no-compile" in cases.probe_arguments(BY_NAME["probe_eager"], cpu=False, batch=16)
    assert cases.probe_arguments(BY_NAME["probe_eager"], cpu=True, batch=16)[:4] == \
        ["--model", "tiny", "--vocab-size", "334"]


def test_the_dry_runs_vocabulary_is_the_one_its_parameter_count_pins(tmp_path):
    """nanoGPT prints its count to 0.01M; the tiny preset's vocabulary of 256 (115,008 parameters, "0.12M") was
    solved as 334 and the probe read as another model. 334 makes the count exactly 120,000: gputop's reading of the
    job, from its command line and that line, is the probe's shape."""
    (tmp_path / "data" / "synthetic").mkdir(parents=True)
    (tmp_path / "data" / "synthetic" / "meta.pkl").write_bytes(b"")
    argv = nanogpt_folder(tmp_path, BY_NAME["xl_eager"], None, cpu=True)
    count = 2 * (12 * 64 * 64 + 2 * 64) + 64 + cases.TINY_VOCAB * 64  # nanoGPT's non-embedding count, biases off
    assert count == 120_000
    stated = read_command_line(argv, str(tmp_path), f"number of parameters: {count / 1e6:.2f}M\n")
    assert stated is not None and stated.shape.vocab_size == cases.TINY_VOCAB
    tiny = GPT_PRESETS["tiny"]
    assert (stated.shape.n_layer, stated.shape.n_head, stated.shape.n_embd, stated.shape.block_size) == \
        (tiny.n_layer, tiny.n_head, tiny.n_embd, tiny.block_size)


def test_the_tf32_patch_keeps_tf32_off_when_train_py_turns_it_on(monkeypatch):
    """train.py runs the config, then sets allow_tf32 = True for matmuls and cuDNN: after the patch both stay
    False (torch's flags are process-wide, so they are put back after)."""
    monkeypatch.setattr(torch.backends.cuda, "matmul", torch.backends.cuda.matmul)
    monkeypatch.setattr(torch.backends, "cudnn", torch.backends.cudnn)
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    try:
        exec(cases.TF32_OFF_PATCH, {})
        torch.backends.cuda.matmul.allow_tf32 = True  # train.py's lines 107 and 108
        torch.backends.cudnn.allow_tf32 = True
        assert torch.backends.cuda.matmul.allow_tf32 is False and torch.backends.cudnn.allow_tf32 is False
        assert torch.backends.cudnn.enabled in (True, False)  # the rest reads through
    finally:
        torch._C._set_cublas_allow_tf32(matmul)
        torch._C._set_cudnn_allow_tf32(cudnn)


@pytest.mark.parametrize("cpu", [False, True])
def test_a_levers_fix_is_the_same_job_with_one_setting_changed(cpu):
    """The compiled case is the eager one with compile pulled, the eager case the checkpointed one with the
    checkpointing dropped, and the TF32 case's bf16 run the true-fp32 case's too: one run measures the other."""
    key = {name: cases.nanogpt_job(BY_NAME[name], cpu, 8).key() for name in BY_NAME if BY_NAME[name].kind == "nanogpt"}

    def fixed(name: str, fix: str) -> cases.Job:
        return cases.nanogpt_job(BY_NAME[name], cpu, 8, fix)

    assert fixed("xl_eager", "compile").key() == key["xl_compiled"]
    assert fixed("xl_checkpointed", "drop_checkpointing").key() == key["xl_eager"]
    assert fixed("xl_eager_fp32", "bf16_autocast").key() == fixed("xl_eager_tf32", "bf16_autocast").key()
    assert fixed("xl_eager_tf32", "bf16_autocast").key() not in key.values()  # a run of its own
    larger = fixed("xl_eager", "larger_micro_batch")
    base = cases.nanogpt_job(BY_NAME["xl_eager"], cpu, 8)
    assert larger.get("batch_size") == 2 * base.get("batch_size")  # type: ignore[operator]
    assert larger.get("batch_size") * larger.get("gradient_accumulation_steps") == \
        base.get("batch_size") * base.get("gradient_accumulation_steps")  # the same tokens per iteration
    with pytest.raises(ValueError):
        fixed("xl_eager", "fused_optimizer")


def test_the_check_pulls_gputops_top_lever_where_it_can():
    loop, eager = BY_NAME["launch_bound"], BY_NAME["xl_eager"]
    assert cases.fix_to_run(loop, "cuda_graphs", cpu=False) == "cuda_graphs"
    assert cases.fix_to_run(loop, "launch_batch", cpu=False) == "launch_batch"
    assert cases.fix_to_run(eager, "power_cap", cpu=False) is None  # recorded, not measured
    assert cases.fix_to_run(eager, None, cpu=False) is None
    # The dry run: the CPU is not the GPU a case was built for; its own lever is pulled, a GPU-only one the next.
    assert cases.fix_to_run(eager, None, cpu=True) == "compile"
    assert cases.fix_to_run(loop, None, cpu=True) == "launch_batch"
    assert cases.fix_to_run(loop, "cuda_graphs", cpu=True) == "launch_batch"
    assert cases.fix_to_run(BY_NAME["data_starved"], None, cpu=True) is None
    assert "--graphs" in cases.loop_command(loop, cpu=False, fix="cuda_graphs")
    assert cases.loop_command(loop, cpu=True, fix="launch_batch")[-2:] == ["--batch", "8"]
    assert cases.fix_units(loop, "launch_batch") == 8 and cases.fix_units(eager, "compile") == 1


def test_the_levers_each_job_pulls():
    assert cases.pulled_levers(BY_NAME["xl_compiled"], cpu=False) == {
        "compile", "bf16_autocast", "fused_attention", "fused_optimizer", "drop_checkpointing"}
    assert cases.pulled_levers(BY_NAME["xl_checkpointed"], cpu=False) == {
        "bf16_autocast", "fused_attention", "fused_optimizer"}
    assert cases.pulled_levers(BY_NAME["xl_eager_fp32"], cpu=False) == {
        "fused_attention", "fused_optimizer", "drop_checkpointing"}
    assert cases.pulled_levers(BY_NAME["xl_eager_fp32"], cpu=True) == {"fused_attention", "drop_checkpointing"}
    assert cases.pulled_levers(BY_NAME["launch_bound"], cpu=False) == {"fused_optimizer"}
    assert cases.pulled_levers(BY_NAME["launch_bound"], cpu=False, fix="cuda_graphs") == {
        "fused_optimizer", "cuda_graphs"}


# The gains probes/diagnosis/levers.py writes, as a snapshot records them.
GAINS = {
    "power_cap": ("~19%", "bound"),
    "bf16_tf32": ("up to about half the matmuls' time; the rest of the step does not shrink", "estimate"),
    "bf16_fp32": ("the matmuls' time several-fold; the rest of the step does not shrink", "estimate"),
    "drop_checkpointing": ("~25%", "estimate"),
    "compile": ("~8% on a bf16 GPT-2 XL step, more where small kernels dominate", "estimate"),
    "cuda_graphs": ("the 80% of the SMs' time with no work on them", "bound"),
    "larger_micro_batch": ("less than the 63% of the SMs' active time spent outside the tensor cores: the "
                           "non-matmul work in it stays", "bound"),
}


def lever(name: str, gain: str | None = None) -> dict:
    most, kind = GAINS[gain or name]
    return {"lever": name.split("_tf32")[0].split("_fp32")[0] if name.startswith("bf16") else name, "most": most,
            "kind": kind, "basis": "…"}


def test_each_gain_is_read_as_the_share_of_the_step_it_says_it_saves():
    def interval(name):
        found = levers.stated(lever(name))
        return round(found.low, 1), None if found.high is None else round(found.high, 1)

    assert interval("power_cap") == (0.0, 16.0)  # a 19% speed-up saves 16% of the step, at most
    assert interval("bf16_tf32") == (0.0, 50.0)
    assert interval("bf16_fp32") == (0.0, None)  # no figure: it saves something
    assert interval("drop_checkpointing") == (12.5, 50.0)  # "~25%" of the step, an estimate: half to twice
    assert interval("compile") == (3.8, None)  # "~8%" faster, "more where …": no ceiling
    assert interval("cuda_graphs") == (0.0, 80.0)
    assert interval("larger_micro_batch") == (0.0, 63.0)
    assert levers.stated({"lever": "compile", "most": "~10%", "kind": "measured"}).record()["low_pct"] == \
        pytest.approx(7.0, abs=0.1)  # a measurement: within a quarter of its 10% speed-up
    assert levers.stated({"lever": "fused_attention", "most": None, "kind": None}) is None


def test_a_lever_is_judged_on_what_it_offered_what_the_job_pulls_and_what_its_fix_measured():
    offered = [lever("cuda_graphs"), lever("larger_micro_batch")]
    inside = levers.judge(offered, frozenset({"fused_optimizer"}), {"lever": "cuda_graphs", "saved_pct": 60.0},
                          "cuda_graphs", on_gpu=True)
    assert inside["top_lever"] == "cuda_graphs" and inside["within"] is True and inside["lever_problems"] == []
    beyond = levers.judge(offered, frozenset(), {"lever": "cuda_graphs", "saved_pct": 90.0}, "cuda_graphs", True)
    assert beyond["within"] is False and "outside its stated gain (saves at most 80% of the step)" in \
        beyond["lever_problems"][0]
    nothing = levers.judge([lever("compile")], frozenset(), {"lever": "compile", "saved_pct": 1.0}, "compile", True)
    assert nothing["within"] is False  # every gain says the lever wins something
    pulled = levers.judge([lever("compile")], frozenset({"compile"}), None, None, on_gpu=True)
    assert pulled["lever_problems"] == ["offered compile, which the job already pulls"] and pulled["within"] is None
    missed = levers.judge([lever("compile")], frozenset(), None, "bf16_autocast", on_gpu=True)
    assert missed["lever_problems"] == ["bf16_autocast, the lever it is built for, was not offered"]
    assert levers.judge([], frozenset(), None, "bf16_autocast", on_gpu=False)["lever_problems"] == []  # the CPU
    other = levers.judge([lever("compile")], frozenset(), {"lever": "launch_batch", "saved_pct": 50.0}, None, True)
    assert other["within"] is None  # a lever gputop did not put first is measured, not judged


def test_the_offered_levers_come_from_the_snapshots_advice_records_in_order():
    snapshot = {"verdict": {"advice": [
        {"text": "The step runs at 98% of …", "lever": None, "gain": None},
        {"text": "Compile the model …", "lever": "compile", "gain": {"most": "~8%", "kind": "estimate", "basis": "b"}},
        {"text": "Fused attention …", "lever": "fused_attention", "gain": None}, "an old snapshot's plain line"]}}
    assert [(found["lever"], found["most"], found["kind"]) for found in levers.offered_levers(snapshot)] == [
        ("compile", "~8%", "estimate"), ("fused_attention", None, None)]
    assert levers.offered_levers(None) == []


def test_a_runs_time_per_unit_is_the_median_of_its_steady_lines():
    nanogpt = "iter 0: loss 10.9, time 61000.00ms, mfu -100.00%\n" + "".join(
        f"iter {i}: loss 9.0, time {t}ms, mfu 50.00%\n" for i, t in enumerate((2600.0, 2560.0, 2540.0, 2580.0), 1))
    assert levers.iteration_seconds(nanogpt, "nanogpt", 0)[0] == 61.0  # the compile's first iteration
    assert levers.median_seconds(nanogpt, "nanogpt", skip=2) == (2.56, 3)
    loop = "".join(f"step {i} | loss 0.4 | step_time {t}ms\n" for i, t in enumerate((9.0, 1.0, 1.2, 1.1), 1))
    assert levers.median_seconds(loop, "loop", skip=1, units=8) == (pytest.approx(1.1e-3 / 8), 3)
    assert levers.median_seconds("", "loop", skip=1) == (None, 0)
    assert levers.measured_gain(2.0, 1.5) == {"saved_pct": 25.0, "speedup_pct": 33.3}


def test_the_preflight_lists_what_is_missing_and_installs_it_from_pypi_or_the_carried_wheels(tmp_path, monkeypatch):
    there = {"pynvml"}
    monkeypatch.setattr(preflight, "present", lambda name: f"/x/{name}" if name in there else None)
    monkeypatch.setattr(preflight, "use_site", lambda site: None)
    (tmp_path / "nanogpt").mkdir()
    for name in gpu_check.NANOGPT_FILES:
        (tmp_path / "nanogpt" / name).write_text("")
    (tmp_path / "whl").mkdir()
    (tmp_path / "whl" / "py_spy-0.4.3-py2.py3-none-manylinux_2_17_x86_64.whl").write_text("")
    installed: list[list[str]] = []

    def installer(arguments, site):
        installed.append(arguments)
        there.add({"psutil": "psutil", "py-spy": "py-spy"}.get(Path(arguments[0]).name.split("-")[0].replace(
            "py_spy", "py-spy"), arguments[0]))
        return None

    common = {"cpu": False, "nanogpt": tmp_path / "nanogpt", "nanogpt_files": gpu_check.NANOGPT_FILES,
              "site": tmp_path / "site", "wheels": tmp_path / "whl", "installer": installer,
              "gpu_line": lambda: ("free GPU memory: 79 of 80 GiB on GPU 0 (processes on it: none)", True)}
    offline = preflight.preflight(install=True, reachable=lambda: False, **common)
    assert offline == ["NVML binding: there (/x/pynvml)",
                       "psutil: MISSING: PyPI not reachable and no psutil wheel in " + str(tmp_path / "whl")
                       + " (bash benchmarks/fetch_wheels.sh)",
                       "py-spy: missing, installed from the carried "
                       f"py_spy-0.4.3-py2.py3-none-manylinux_2_17_x86_64.whl into {tmp_path / 'site'}",
                       f"nanoGPT: there in {tmp_path / 'nanogpt'}",
                       "free GPU memory: 79 of 80 GiB on GPU 0 (processes on it: none)"]
    there.discard("py-spy")
    online = preflight.preflight(install=True, reachable=lambda: True, **common)
    assert installed[-2:] == [["psutil"], ["py-spy"]]
    assert online[1:3] == [f"psutil: missing, installed from PyPI into {tmp_path / 'site'}",
                           f"py-spy: missing, installed from PyPI into {tmp_path / 'site'}"]
    (tmp_path / "nanogpt" / "train.py").unlink()
    dry = preflight.preflight(**(common | {"cpu": True}), install=False)
    assert dry[-2:] == [f"nanoGPT: MISSING train.py in {tmp_path / 'nanogpt'} (benchmarks/fetch_nanogpt.sh GIT_DIR "
                        "writes them)", "free GPU memory: not read (the dry run runs on the CPU)"]


def test_the_free_gpu_memory_line_reads_gpu_0_through_nvml():
    line, enough = preflight.free_gpu_line(FakeNvml([FakeGpu(processes=[(4242, 70 * GIB)])]))
    assert not enough and line.startswith("free GPU memory: ") and "processes on it: 4242" in line
    line, enough = preflight.free_gpu_line(FakeNvml([FakeGpu()], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    assert not enough and line.startswith("free GPU memory: no GPU read (NVIDIA driver not loaded")


def test_the_vendored_nanogpt_is_the_pinned_commits():
    """benchmarks/nanogpt/ holds karpathy/nanoGPT's three files as commit 3adf61e has them (git's blob hashes), its
    MIT licence, and a README naming the commit."""
    blobs = {"model.py": "c698f8b60129d793494de058b0dd4e318c0dcb5e",
             "train.py": "de5785051050d64bbda37a4964c2c079f0739b2b",
             "configurator.py": "a8bba9599537cbb34b378399a077b525a87d497f"}
    folder = REPO / "benchmarks" / "nanogpt"
    for name, blob in blobs.items():
        data = (folder / name).read_bytes()
        assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == blob, name  # git hash-object
    assert (folder / "LICENSE").read_text().startswith("MIT License\n\nCopyright (c) 2022 Andrej Karpathy")
    assert "3adf61e154c3fe3fca428ad6bc3818b27a3b8291" in (folder / "README.md").read_text()
    assert gpu_check.NANOGPT == folder


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
    # That snapshot predates the advice records: it offers no lever, and xl_compiled is built for none.
    assert job["levers"] == [] and job["lever_problems"] == [] and job["verdict"] == "pass"
    assert summary.table_rows("NVIDIA H200", [job, failed], "2026-11-26") == [
        "| NVIDIA H200 | 2026-11-26 | xl_compiled | nanoGPT train.py, GPT-2 XL, compiled, bf16 | "
        "gpu_throttled (progressing) | 2.56 s/iter · MFU 53% · util 100%, SM active 95%, tensor active 64% · "
        "693/700 W | yes | none offered | – | – | pass |",
        "| NVIDIA H200 | 2026-11-26 | launch_bound | tiny deep MLP, batch 1: launch-bound | failed: the job exited (1) "
        "| – | – | – | – | – | **fail**: failed |"]


def test_a_row_sets_the_top_levers_prediction_beside_its_measurement():
    snapshot = {"verdict": {"bottleneck": "gpu_bound", "advice": [
        {"text": "bf16 autocast …", "lever": "bf16_autocast",
         "gain": {"most": "up to about half the matmuls' time; the rest of the step does not shrink",
                  "kind": "estimate", "basis": "TF32"}},
        {"text": "Compile the model …", "lever": "compile", "gain": {"most": "~8%", "kind": "estimate", "basis": "b"}},
        {"text": "A fused optimizer …", "lever": "fused_optimizer", "gain": None}]}}
    outcome = {"status": "ok", "measurement": {"lever": "bf16_autocast", "base_s": 1.0, "fixed_s": 0.6,
                                               "saved_pct": 40.0, "speedup_pct": 66.7, "by": "its own run"}}
    row = summary.watched_row(BY_NAME["xl_eager_tf32"], outcome, snapshot)
    assert (summary.top_lever(row), summary.predicted(row)) == (
        "bf16_autocast (1st of 3)",
        "up to about half the matmuls' time; the rest of the step does not shrink (estimate)")
    assert summary.measured(row) == "40% of the time saved (+67% speed), by its own run"
    # fused AdamW is what nanoGPT's train.py runs on CUDA: offering it fails the case
    assert row["within"] is True and row["verdict"] == "fail"
    assert summary.judged(row) == "**fail**: offered fused_optimizer, which the job already pulls"
    slower = summary.watched_row(BY_NAME["xl_eager_tf32"], outcome | {"measurement": outcome["measurement"] | {
        "saved_pct": 60.0}}, {"verdict": {"bottleneck": "gpu_bound", "advice": snapshot["verdict"]["advice"][:2]}})
    assert slower["within"] is False and "outside its stated gain" in summary.judged(slower)


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
    assert "| NVIDIA H200 | 2026-11-27 | xl_compiled |" in text
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
