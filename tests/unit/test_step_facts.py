"""What the step already does (probes/diagnosis/step_facts.py), read from constructed stacks, source files written
here, the command line and NVML; and from the real H200 recordings of tests/fixtures/h200, where only what their
stacks show may be said (the job's files are not on this machine)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.compiled_code import COMPILED_BACKWARD, COMPILING
from support.frames import BACKWARD, FORWARD, PID, ROOT, SITE, TRAIN, fr, h200, main_count, make_frame, proc
from support.h200 import recording

from probes.diagnosis.evidence import gather
from probes.diagnosis.gpu_summary import GpuSummary, gpu_summary
from probes.diagnosis.step_facts import MIN_EAGER_SAMPLES, StepFacts, command_line_marks, step_facts
from probes.frame import StackCount, StackFrame
from probes.outputs.recording import load_recording
from probes.sensors import source_lines

NO_GPU = GpuSummary(available=False)


def facts(*counts: StackCount, cmdline: tuple[str, ...] = (), gpu: GpuSummary = NO_GPU) -> StepFacts:
    frame = make_frame(0, counts=counts, processes=(proc(cmdline=cmdline),))
    return step_facts([frame], PID, gpu)


def write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def line_of(path: str, fragment: str) -> int:
    return next(i for i, text in enumerate(Path(path).read_text().splitlines(), 1) if fragment in text)


def thread(stack, n: int = 3, name: str = "Thread-2 (_pin_memory_loop)") -> StackCount:
    return StackCount(pid=PID, tid=PID + 1, thread_name=name, idle=False, frames=stack, count=n)


# --- compiled or eager


def test_compiled_code_in_the_stacks_says_compiled_and_where():
    found = facts(main_count(COMPILED_BACKWARD, 4), main_count(FORWARD, 1))
    assert found.compiled is not None and found.compiled.value == "compiled"
    assert found.compiled.origin == "stacks" and found.compiled.samples == 4 and found.compiled.of_samples == 5
    assert "torch.compile's generated code czn2vzoo….py" in found.compiled.source()


def test_compiling_is_compiled_too():
    assert facts(main_count(COMPILING, 2)).compiled.value == "compiled"


def test_module_forwards_outside_compiled_code_are_eager_once_enough_were_seen():
    model_called = FORWARD[:3] + (fr("Module._call_impl", SITE + "torch/nn/modules/module.py", 1789),) + FORWARD[3:]
    found = facts(main_count(model_called, MIN_EAGER_SAMPLES))
    assert found.compiled.value == "eager"
    assert found.compiled.where == "GPT.forward (model.py:180)"  # the outermost module: the model
    assert facts(main_count(FORWARD, MIN_EAGER_SAMPLES - 1)).compiled is None  # too few to say
    assert facts(main_count(BACKWARD, 20)).compiled is None  # backward alone shows no module


def test_the_command_line_speaks_only_where_the_stacks_do_not():
    said = facts(cmdline=("python", "train.py", "config/x.py", "--compile=False"))
    assert (said.compiled.value, said.compiled.origin, said.compiled.where) == \
        ("eager", "command line", "--compile=False")
    assert facts(main_count(COMPILED_BACKWARD, 2), cmdline=("python", "train.py", "--compile=False")) \
        .compiled.origin == "stacks"


def test_command_line_flags_of_fixed_meaning():
    marks = command_line_marks(["python", "run.py", "--torch_compile", "True", "--bf16", "--gradient_checkpointing",
                                "--optim", "adamw_torch_fused", "--dtype=float16"])
    assert {name: (m.value, m.where) for name, m in marks.items()} == {
        "compiled": ("compiled", "--torch_compile True"), "autocast": ("bfloat16", "--bf16"),
        "checkpointing": ("on", "--gradient_checkpointing"), "optimizer": ("fused", "--optim adamw_torch_fused"),
        "compute_dtype": ("float16", "--dtype=float16")}
    assert command_line_marks(["train.py", "--precision", "16-mixed"])["autocast"].value == "float16"
    assert command_line_marks(["train.py", "--compile", "config/x.py"]) == {}  # not a value of --compile: unknown


# --- attention


def test_hugging_face_attention_functions_name_their_implementation():
    sdpa = (fr("sdpa_attention_forward", SITE + "transformers/integrations/sdpa_attention.py", 96),
            fr("LlamaAttention.forward", SITE + "transformers/models/llama/modeling_llama.py", 280)) + ROOT
    eager = (fr("eager_attention_forward", SITE + "transformers/models/llama/modeling_llama.py", 180),) + sdpa[1:]
    assert facts(main_count(sdpa)).attention.value == "sdpa"
    assert facts(main_count(eager)).attention.value == "by_hand"
    flash = (fr("_flash_attn_forward", SITE + "flash_attn/flash_attn_interface.py", 91),) + sdpa[1:]
    assert facts(main_count(flash)).attention.value == "flash_attn"


def test_softmax_called_from_an_attention_forward_is_attention_by_hand():
    stack = (fr("softmax", SITE + "torch/nn/functional.py", 2140),
             fr("CausalSelfAttention.forward", "/home/alice/nanogpt/model.py", 66)) + FORWARD[1:]
    found = facts(main_count(stack, 2))
    assert (found.attention.value, found.attention.origin) == ("by_hand", "stacks")
    assert "called from CausalSelfAttention.forward (model.py:66)" in found.attention.where
    mlp = (stack[0], fr("Router.forward", "/home/alice/nanogpt/moe.py", 30)) + FORWARD[1:]
    assert facts(main_count(mlp)).attention is None  # a softmax outside attention says nothing of it


MODEL = '''import torch
import torch.nn.functional as F


class CausalSelfAttention(torch.nn.Module):
    def forward(self, x):
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * self.scale
            att = att.masked_fill(self.bias == 0, float("-inf"))
            y = att @ v
        return y
'''


def attention_stack(model: str, line: int) -> tuple[StackFrame, ...]:
    return (fr("CausalSelfAttention.forward", model, line),) + FORWARD[1:]


def test_the_line_py_spy_names_says_which_attention_runs(tmp_path):
    model = write(tmp_path / "model.py", MODEL)
    sdpa = facts(main_count(attention_stack(model, line_of(model, "scaled_dot_product_attention")), 3))
    assert (sdpa.attention.value, sdpa.attention.origin, sdpa.attention.samples) == ("sdpa", "source", 3)
    assert sdpa.attention.where == "CausalSelfAttention.forward (model.py:9) calls scaled_dot_product_attention"
    by_hand = facts(main_count(attention_stack(model, line_of(model, "masked_fill"))))
    assert by_hand.attention.value == "by_hand" and "masked_fill" in by_hand.attention.where


def test_a_line_not_readable_here_or_moved_says_nothing(tmp_path):
    missing = str(tmp_path / "elsewhere" / "model.py")
    found = facts(main_count(attention_stack(missing, 9)))
    assert found.attention is None and found.unread == (missing,)
    # The file changed since: line 9 now sits in another function than the one py-spy named.
    moved = write(tmp_path / "moved.py", "def other():\n" + "\n" * 7 + "    F.scaled_dot_product_attention(q, k, v)\n")
    assert facts(main_count(attention_stack(moved, 9))).attention is None


GENERATED = '''# AOT ID: ['0_forward']
def call(args):
    buf0 = empty_strided_cuda((16384, 4800), (4800, 1), torch.bfloat16)
    buf1 = empty_strided_cuda((16384, 1600), (1600, 1), torch.float32)
    buf2 = empty_strided_cuda((16384, 1600), (1600, 1), torch.bfloat16)
    # Topologically Sorted Source Nodes: [y], Original ATen: [aten._scaled_dot_product_flash_attention]
    buf3 = torch.ops.aten._scaled_dot_product_flash_attention.default(buf0, buf0, buf0, 0.0, True)
'''


def generated_stack(path: str) -> tuple[StackFrame, ...]:
    return (StackFrame("Runner.call", path, 7),) + COMPILED_BACKWARD[1:]


def test_a_compiled_model_s_attention_and_precision_are_read_from_its_generated_code(tmp_path):
    path = write(tmp_path / "torchinductor_alice" / "ab" / f"cab{'x' * 48}.py", GENERATED)
    found = facts(main_count(generated_stack(path), 4))
    assert found.compiled.value == "compiled"
    assert (found.attention.value, found.attention.origin) == ("sdpa", "generated code")
    assert found.attention.where == "cabxxxxx….py calls aten._scaled_dot_product_flash_attention"
    assert found.compute_dtype.value == "bfloat16"
    assert found.compute_dtype.where == "buffers of the compiled graphs: 2 bfloat16, 1 float32"


def test_generated_code_not_here_leaves_attention_unknown(tmp_path):
    path = str(tmp_path / "torchinductor_alice" / "cd" / f"ccd{'y' * 48}.py")
    found = facts(main_count(generated_stack(path), 4))
    assert found.attention is None and found.compute_dtype is None and path in found.unread


# --- autocast, GradScaler


STEP = '''import torch


def train_step(model, x, scaler, ctx, use_amp):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x)
    with ctx:
        loss = model(x)
    with torch.autocast("cuda", enabled=use_amp):
        loss = model(x)
    lossf = loss.item()
    x, y = x.pin_memory().to("cuda", non_blocking=True), y
    return loss
'''


def step_stack(path: str, fragment: str, inner=FORWARD[:3]) -> tuple[StackFrame, ...]:
    return tuple(inner) + (fr("train_step", path, line_of(path, fragment)),) + ROOT


def test_autocast_is_read_from_the_with_around_the_sampled_line(tmp_path):
    path = write(tmp_path / "step.py", STEP)
    found = facts(main_count(step_stack(path, "loss = model(x)"), 2))
    assert (found.autocast.value, found.autocast.origin) == ("bfloat16", "source")
    assert found.autocast.where.startswith("`with …autocast(…)` at step.py:5 around train_step (step.py:6)")


def test_autocast_in_a_variable_or_switched_by_one_stays_unknown(tmp_path):
    path = write(tmp_path / "step.py", STEP)
    lines = Path(path).read_text().splitlines()
    for after in ("with ctx:", "enabled=use_amp"):
        line = next(i for i, t in enumerate(lines, 1) if after in t) + 1
        stack = tuple(FORWARD[:3]) + (fr("train_step", path, line),) + ROOT
        assert facts(main_count(stack)).autocast is None, after


def test_a_native_autocast_frame_says_autocast_is_on():
    stack = (StackFrame("at::autocast::WrapFunction_<...>::call", "libtorch_cpu.so", 0, native=True),) + FORWARD
    assert facts(main_count(stack)).autocast.value == "on"


SCALER = '''class GradScaler:
    def step(
        self, optimizer, *args, **kwargs
    ) -> float | None:
        """Steps."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)

        retval = self._maybe_opt_step(optimizer, optimizer_state, *args, **kwargs)
        return retval
'''
ADAM = (fr("_fused_adamw", SITE + "torch/optim/adamw.py", 700), fr("AdamW.step", SITE + "torch/optim/adamw.py", 220))


def scaler_stack(grad_scaler: str, line: int, *inner: StackFrame) -> tuple[StackFrame, ...]:
    return (*inner, *ADAM, fr("GradScaler.step", grad_scaler, line), fr("<module>", TRAIN, 311))


def test_grad_scaler_enabled_disabled_or_only_seen(tmp_path):
    grad_scaler = write(tmp_path / "torch" / "amp" / "grad_scaler.py", SCALER)
    disabled = facts(main_count(scaler_stack(grad_scaler, 7))).grad_scaler
    assert (disabled.value, disabled.origin) == ("disabled", "source")
    maybe_step = fr("GradScaler._maybe_opt_step", grad_scaler, 9)
    enabled = facts(main_count(scaler_stack(grad_scaler, 9)[:2] + (maybe_step,) + scaler_stack(grad_scaler, 9)[2:]))
    assert enabled.grad_scaler.value == "enabled"
    gone = str(tmp_path / "gone" / "torch" / "amp" / "grad_scaler.py")
    assert facts(main_count(scaler_stack(gone, 400))).grad_scaler.value == "seen"


# --- checkpointing, optimizer


def test_checkpoint_frames_say_checkpointing_and_count_the_recomputed_forward():
    forward = (fr("checkpoint", SITE + "torch/utils/checkpoint.py", 519),) + FORWARD[1:]
    recompute = FORWARD[:3] + (
        fr("_checkpoint_without_reentrant_generator.<locals>.recompute_fn", SITE + "torch/utils/checkpoint.py", 1688),
        fr("_checkpoint_hook.__init__.<locals>.unpack_hook", SITE + "torch/utils/checkpoint.py", 1183)) + BACKWARD
    found = facts(main_count(forward, 3), main_count(recompute, 2), main_count(BACKWARD, 5))
    assert (found.checkpointing.value, found.checkpointing.samples) == ("on", 5)
    assert found.recompute_samples == 2
    assert facts(main_count(BACKWARD, 5)).checkpointing is None


@pytest.mark.parametrize(("function", "file", "kind"), [
    ("_fused_adamw", "torch/optim/adamw.py", "fused"),
    ("_multi_tensor_adam", "torch/optim/adam.py", "foreach"),
    ("_single_tensor_sgd", "torch/optim/sgd.py", "per_parameter"),
    ("FusedAdam.step", "apex/optimizers/fused_adam.py", "fused"),
])
def test_the_optimizer_s_implementation(function, file, kind):
    stack = (fr(function, SITE + file, 100), fr("Optimizer.step", SITE + "torch/optim/optimizer.py", 80)) + ROOT
    assert facts(main_count(stack)).optimizer.value == kind


# --- host syncs, copies


def test_host_syncs_from_the_user_s_line_and_from_frames(tmp_path):
    path = write(tmp_path / "step.py", STEP)
    item = (fr("train_step", path, line_of(path, "loss.item()")),) + ROOT
    printed = (fr("_tensor_str", SITE + "torch/_tensor_str.py", 700),
               fr("Tensor.__format__", SITE + "torch/_tensor.py", 1100), fr("log", TRAIN, 40)) + ROOT
    synchronize = (fr("synchronize", SITE + "torch/cuda/__init__.py", 1040), fr("train_step", TRAIN, 50)) + ROOT
    native = (StackFrame("at::native::_local_scalar_dense_cuda", "libtorch_cuda.so", 0, native=True),
              fr("train_step", TRAIN, 51)) + ROOT
    found = facts(main_count(item, 4), main_count(printed, 3), main_count(synchronize, 2), main_count(native, 1))
    assert [(s.value, s.origin, s.samples) for s in found.host_syncs] == [
        ("item", "source", 4), ("print", "stacks", 3), ("synchronize", "stacks", 2)]  # the three most sampled
    assert found.host_syncs[0].where == f"train_step (step.py:{line_of(path, 'loss.item()')}) calls .item()"
    assert facts(main_count(native)).host_syncs[0].value == "item"


def test_a_sync_call_on_a_line_whose_callee_runs_is_not_the_one_waiting(tmp_path):
    path = write(tmp_path / "step.py", STEP)
    assert facts(main_count(step_stack(path, "loss.item()"))).host_syncs == ()  # the forward runs, not .item()


def test_pinned_memory_and_non_blocking_copies(tmp_path):
    path = write(tmp_path / "step.py", STEP)
    copy = facts(main_count((fr("train_step", path, line_of(path, "non_blocking")),) + ROOT))
    assert (copy.pin_memory.value, copy.pin_memory.origin) == ("on", "source")
    assert copy.non_blocking.value == "on" and "non_blocking=True" in copy.non_blocking.where
    loop = (fr("_pin_memory_loop", SITE + "torch/utils/data/_utils/pin_memory.py", 49),
            fr("Thread.run", "/usr/lib/python3.11/threading.py", 982))
    pinned = facts(main_count(FORWARD, 2), thread(loop))
    assert pinned.pin_memory.value == "on" and pinned.pin_memory.where.endswith("on another thread")
    assert facts(main_count(FORWARD, 2)).pin_memory is None


# --- GPU memory, Evidence


def test_gpu_memory_used_of_total_from_nvml():
    frame = make_frame(0, gpu=h200())
    found = step_facts([frame], PID, gpu_summary([frame])).gpu_memory
    assert found is not None and found.value == (60 * 2**30, 141 * 2**30) and found.origin == "NVML"
    assert found.where == "GPU 0: 60.0 of 141.0 GiB used"


def test_evidence_carries_the_step_facts():
    frames = [make_frame(i, counts=[main_count(COMPILED_BACKWARD)]) for i in range(3)]
    assert gather(frames, 5.0).step.compiled.value == "compiled"


def test_lines_say_each_fact_with_where_it_was_read():
    found = facts(main_count(COMPILED_BACKWARD, 4), main_count((ADAM[0],) + ROOT, 1))
    assert found.lines() == (
        "compiled (stacks: Runner.call (torch.compile's generated code czn2vzoo….py:224) in 4 of 5 main-thread "
        "samples)",
        "optimizer fused (stacks: _fused_adamw (torch/optim/adamw.py:700) in 1 of 5 main-thread samples)",
        "not readable here, so what their lines do is unknown: torch.compile's generated code czn2vzoo….py")
    assert found.summary() == "compiled · optimizer fused"
    assert StepFacts().summary() is None


# --- the source reader


def test_source_lines_follow_signatures_over_several_lines_and_never_block(tmp_path):
    path = write(tmp_path / "grad_scaler.py", SCALER)
    assert source_lines.line_in(path, 7, "GradScaler.step") == "return optimizer.step(*args, **kwargs)"
    assert source_lines.line_in(path, 7, "GradScaler.update") is None
    assert source_lines.previous_code_line(path, 7) == "if not self._enabled:"
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    assert source_lines.file_lines(str(fifo)) is None  # a FIFO would block the reader: never opened
    assert source_lines.file_lines("<string>") is None


# --- the real H200 runs: what their stacks show, and nothing their files would have had to say


def test_gpt2_xl_on_the_h200_is_compiled_with_a_fused_optimizer(tmp_path):
    frames = list(load_recording(recording("gpt2xl_s2", tmp_path)).frames)
    found = gather(frames, 5.0).step
    assert found.compiled.value == "compiled" and found.compiled.origin == "stacks"
    assert "torch.compile's generated code cblfrorb….py" in found.compiled.where
    assert (found.optimizer.value, found.optimizer.where) == ("fused", "_fused_adam (torch/optim/adam.py:880)")
    assert found.grad_scaler.value == "seen"  # nanoGPT's scaler: whether it scales is on a line not here
    assert found.gpu_memory.where == "GPU 0: 76.4 of 140.4 GiB used (the job's processes: 75.8 GiB)"
    # Attention, autocast and the per-step .item() are on lines of files only the GPU machine had.
    assert (found.attention, found.autocast, found.compute_dtype, found.checkpointing, found.host_syncs) == \
        (None, None, None, None, ())
    assert "/home/user/nanoGPT/train.py" in found.unread
