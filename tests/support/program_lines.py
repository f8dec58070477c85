"""The step lines of training programs that need a GPU to run, written with the programs' own f-strings and their
own arithmetic for the figures in them, so tests and CPU targets print exactly what the programs print.

- modded-nanogpt (KellerJordan/modded-nanogpt f411b3d, train_gpt.py; the file last changed in 91955ec): the two
  ``print0`` f-strings of the training loop (its lines 2342 and 2369) and the bookkeeping of ``training_time_ms``
  around them: the clock is stopped before each validation and started again after it.
- nanochat (karpathy/nanochat 92d63d4): scripts/base_train.py's step line (its line 567) and GPU line (93),
  scripts/chat_sft.py's step line (469), and the arithmetic before them: ``tok_per_sec = int(total_batch_size /
  dt)``, ``mfu = 100 * flops_per_sec / (gpu_peak_flops * ddp_world_size)``.

The f-strings are copied as written (``# noqa`` where their style is not this project's).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# --- modded-nanogpt ----------------------------------------------------------------------------------------------


def modded_nanogpt_step(step: int, train_steps: int, approx_training_time_ms: float) -> str:
    """After training step ``step`` (0-based): train_gpt.py's step line."""
    return f"step:{step+1}/{train_steps} train_time:{approx_training_time_ms:.0f}ms step_avg:{approx_training_time_ms/(step + 1):.2f}ms"  # noqa: E501


def modded_nanogpt_val(step: int, train_steps: int, val_loss: float, training_time_ms: float) -> str:
    """Before training step ``step`` (0-based), once validation ran: train_gpt.py's validation line."""
    return f"step:{step}/{train_steps} val_loss:{val_loss:.4f} train_time:{training_time_ms:.0f}ms step_avg:{training_time_ms/max(step, 1):.2f}ms"  # noqa: E501


@dataclass
class ModdedNanogptClock:
    """train_gpt.py's training_time_ms and t0 (seconds here): the time training ran, validation left out."""

    training_time_ms: float = 0.0
    t0: float = 0.0

    def start(self, now: float) -> None:  # "start the clock" (and "start the clock again" after validation)
        self.t0 = now

    def stop(self, now: float) -> None:  # "stop the clock" before validation
        self.training_time_ms += 1000 * (now - self.t0)

    def approx(self, now: float) -> float:  # approx_training_time_ms, read for the step line without stopping
        return self.training_time_ms + 1000 * (now - self.t0)


def modded_nanogpt_log(step_s: float, val_s: float, steps: int, train_steps: int = 1285,
                       val_loss_every: int = 250) -> list[str]:
    """The lines a run prints when each step takes ``step_s`` and each validation ``val_s`` seconds, following
    train_gpt.py's loop: validation at step 0, every ``val_loss_every`` steps and at the last step."""
    clock, now, lines = ModdedNanogptClock(), 0.0, []
    clock.start(now)
    for step in range(steps + 1):
        last_step = step == train_steps
        if last_step or (val_loss_every > 0 and step % val_loss_every == 0):
            clock.stop(now)
            now += val_s
            lines.append(modded_nanogpt_val(step, train_steps, 10.8258 - 0.01 * step, clock.training_time_ms))
            clock.start(now)
        if last_step or step == steps:
            break
        now += step_s
        lines.append(modded_nanogpt_step(step, train_steps, clock.approx(now)))
    return lines


# --- nanochat ----------------------------------------------------------------------------------------------------


@dataclass
class NanochatRun:
    """What base_train.py knows when it prints a step line (its names)."""

    num_iterations: int
    total_batch_size: int  # tokens of one optimizer step over every rank
    num_flops_per_token: float  # model.estimate_flops()
    gpu_peak_flops: float  # get_peak_flops(device name); float('inf') on CPU
    ddp_world_size: int = 1
    total_training_time: float = 0.0
    smooth_train_loss: float = 0.0
    history: list[str] = field(default_factory=list)

    def gpu_line(self, gpu_device_name: str) -> str:
        gpu_peak_flops = self.gpu_peak_flops
        return f"GPU: {gpu_device_name} | Peak FLOPS (BF16): {gpu_peak_flops:.2e}"

    def numbers(self, step: int, dt: float, train_loss_f: float) -> dict:
        """base_train.py's arithmetic between the step's timing and its print."""
        ema_beta = 0.9
        self.smooth_train_loss = ema_beta * self.smooth_train_loss + (1 - ema_beta) * train_loss_f
        debiased_smooth_loss = self.smooth_train_loss / (1 - ema_beta**(step + 1))
        pct_done = 100 * step / self.num_iterations
        tok_per_sec = int(self.total_batch_size / dt)
        flops_per_sec = self.num_flops_per_token * self.total_batch_size / dt
        mfu = 100 * flops_per_sec / (self.gpu_peak_flops * self.ddp_world_size)
        if step > 10:
            self.total_training_time += dt  # only count the time after the first 10 steps
        return dict(debiased_smooth_loss=debiased_smooth_loss, pct_done=pct_done, tok_per_sec=tok_per_sec, mfu=mfu)

    def step_line(self, step: int, dt: float, train_loss_f: float, lrm: float = 1.0,
                  epoch: str = "1 pq: 0 rg: 0") -> str:
        """scripts/base_train.py's step line for step ``step`` (0-based) that took ``dt`` seconds."""
        figures = self.numbers(step, dt, train_loss_f)
        debiased_smooth_loss, pct_done = figures["debiased_smooth_loss"], figures["pct_done"]
        tok_per_sec, mfu = figures["tok_per_sec"], figures["mfu"]
        num_iterations, total_training_time = self.num_iterations, self.total_training_time
        steps_done = step - 10
        if steps_done > 0:
            avg_time_per_step = total_training_time / steps_done
            remaining_steps = num_iterations - step
            eta_seconds = remaining_steps * avg_time_per_step
            eta_str = f" | eta: {eta_seconds/60:.1f}m"
        else:
            eta_str = ""
        return f"step {step:05d}/{num_iterations:05d} ({pct_done:.2f}%) | loss: {debiased_smooth_loss:.6f} | lrm: {lrm:.2f} | dt: {dt * 1000:.2f}ms | tok/sec: {tok_per_sec:,} | bf16_mfu: {mfu:.2f} | epoch: {epoch} | total time: {total_training_time/60:.2f}m{eta_str}"  # noqa: E501

    def sft_step_line(self, step: int, dt: float, train_loss_f: float, lrm: float = 1.0, current_epoch: int = 0) -> str:
        """scripts/chat_sft.py's step line (no total, ``mfu:``, no eta)."""
        figures = self.numbers(step, dt, train_loss_f)
        debiased_smooth_loss, pct_done = figures["debiased_smooth_loss"], figures["pct_done"]
        tok_per_sec, mfu, total_training_time = figures["tok_per_sec"], figures["mfu"], self.total_training_time
        return f"step {step:05d} ({pct_done:.2f}%) | loss: {debiased_smooth_loss:.6f} | lrm: {lrm:.2f} | dt: {dt * 1000:.2f}ms | tok/sec: {tok_per_sec:,} | mfu: {mfu:.2f} | epoch: {current_epoch} | total time: {total_training_time/60:.2f}m"  # noqa: E501


def nanochat_val_line(step: int, val_bpb: float) -> str:
    """base_train.py's evaluation line."""
    return f"Step {step:05d} | Validation bpb: {val_bpb:.6f}"
