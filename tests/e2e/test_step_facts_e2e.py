"""The step facts end to end (probes/diagnosis/step_facts.py): tests/targets/step_facts_train.py written three ways,
watched by the real command (`python -m tui --pid P --record REC`, py-spy underneath), the facts read from its
recording as it grows until they say what the target was built with, or the test fails naming the last facts seen.

One target covers several facts each: eager with attention written by hand, checkpointing, bf16 autocast, a
per-parameter optimizer, a disabled GradScaler and `.item()` each step; compiled with scaled_dot_product_attention, a
fused optimizer and an enabled GradScaler; eager with scaled_dot_product_attention and a foreach optimizer. py-spy
runs at a fixed 20 Hz so the rarer parts of a step (the optimizer) show within seconds, not at the settled 1 Hz.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO
from support.processes import start_logged, wait_for
from support.recorded import frames_so_far

from probes.diagnosis.evidence import gather
from probes.diagnosis.step_facts import StepFacts

pytestmark = pytest.mark.slow

TARGET = "step_facts_train.py"


def watch_facts(pid: int, tmp_path: Path, reached, timeout: float = 60.0) -> StepFacts:
    """Run gputop on `pid`, recording, until the step facts gathered from the recording satisfy `reached`."""
    recording = tmp_path / "frames.jsonl"
    command = subprocess.Popen(
        [sys.executable, "-m", "tui", "--pid", str(pid), "--snapshot", str(tmp_path / "snapshot.json"),
         "--duration", str(timeout + 30), "--record", str(recording), "--no-gpu", "--rate", "20"],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True)
    last: list[StepFacts] = []

    def facts_reached() -> bool:
        frames = frames_so_far(recording)
        if not frames:
            return False
        last[:] = [gather(frames, 5.0).step]
        return reached(last[0])

    try:
        wait_for(facts_reached, timeout=timeout, interval=1.0)
    except pytest.fail.Exception:
        said = "\n".join(last[0].lines()) if last else "no frame"
        pytest.fail(f"the step facts sought did not come within {timeout:g} s; the last were:\n{said}")
    finally:
        command.send_signal(signal.SIGTERM)
        _, stderr = command.communicate(timeout=60)
    assert command.returncode == 0, stderr
    return last[0]


def value(fact) -> str | None:
    return fact.value if fact is not None else None


def test_an_eager_step_with_attention_by_hand_checkpointing_autocast_and_a_loop_optimizer(spawn_target, tmp_path):
    target = start_logged(spawn_target, tmp_path, TARGET, "--checkpoint", "--autocast", "--item", "--optimizer",
                          "loop", "--scaler", "off")
    wanted = {"compiled": "eager", "attention": "by_hand", "autocast": "bfloat16", "checkpointing": "on",
              "optimizer": "per_parameter", "grad_scaler": "disabled"}
    facts = watch_facts(target.pid, tmp_path, lambda f: all(value(getattr(f, k)) == v for k, v in wanted.items())
                        and any(s.value == "item" for s in f.host_syncs))
    assert facts.autocast.where.startswith("`with …autocast(…)` at step_facts_train.py:")
    assert "HandAttention.forward (step_facts_train.py:" in facts.attention.where
    assert facts.recompute_samples > 0  # the checkpointed blocks run their forward again inside backward
    sync = next(s for s in facts.host_syncs if s.value == "item")
    assert (sync.origin, sync.where.split(" (")[0]) == ("source", "main")
    assert facts.compute_dtype is None and facts.unread == ()


def test_a_compiled_step_with_sdpa_a_fused_optimizer_and_an_enabled_scaler(spawn_target, tmp_path):
    target = start_logged(spawn_target, tmp_path, TARGET, "--compile", "--attention", "sdpa", "--optimizer", "fused",
                          "--scaler", "on", "--batch", "1", timeout=300.0)
    wanted = {"compiled": "compiled", "attention": "sdpa", "compute_dtype": "float32", "optimizer": "fused",
              "grad_scaler": "enabled"}
    facts = watch_facts(target.pid, tmp_path, lambda f: all(value(getattr(f, k)) == v for k, v in wanted.items()))
    assert facts.attention.origin == "generated code"
    assert facts.attention.where.endswith("calls aten._scaled_dot_product_flash_attention_for_cpu")
    assert (facts.autocast, facts.checkpointing, facts.host_syncs) == (None, None, ())


def test_an_eager_step_with_sdpa_and_a_foreach_optimizer(spawn_target, tmp_path):
    target = start_logged(spawn_target, tmp_path, TARGET, "--attention", "sdpa", "--optimizer", "foreach",
                          "--batch", "2")
    wanted = {"compiled": "eager", "attention": "sdpa", "optimizer": "foreach"}
    facts = watch_facts(target.pid, tmp_path, lambda f: all(value(getattr(f, k)) == v for k, v in wanted.items()))
    assert facts.attention.origin == "source"
    assert facts.attention.where.startswith("SdpaAttention.forward (step_facts_train.py:")
    assert (facts.autocast, facts.grad_scaler) == (None, None)
