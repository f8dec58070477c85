"""checkpoint_save: the main thread in torch.save, safetensors or a framework's checkpoint call, and how fast
it writes."""

from __future__ import annotations

from probes.diagnosis.evidence import Evidence
from probes.diagnosis.rules.lines import byte_rate, main_share_line
from probes.diagnosis.rules.rule import BottleneckFacts, Candidate, FixRemoves, Rule
from probes.diagnosis.stacks import CHECKPOINT

# Below this the main process is not writing a checkpoint out (a few bytes a second are a log line).
WRITING_BYTES_PER_S = 1_000_000.0

CHECKPOINT_SAVE = BottleneckFacts(
    name="checkpoint_save",
    words="saving a checkpoint",
    runs_on_host_cpu=True,
    short_of_host_cpu=False,
    hung_in=(CHECKPOINT,),
    badge="worth_fixing",
    fix_removes=FixRemoves(
        phases=("checkpoint",), activities=(CHECKPOINT,),
        why="if checkpoints were saved in the background (saving takes {pct} of the time)"),
    gpu_busy=False,
    kernels_bound=False,
    news_while_starting=False,
)


def evaluate(ev: Evidence) -> Candidate | None:
    share = ev.main.share(CHECKPOINT)
    if share < 0.05:
        return None
    lines = [main_share_line(ev, share, "saving a checkpoint", CHECKPOINT)]
    if ev.main_write_per_s is not None and ev.main_write_per_s >= WRITING_BYTES_PER_S:
        lines.append(f"main process writing {byte_rate(ev.main_write_per_s)}")
    elif ev.main_write_per_s is not None:
        # A figure of bytes a second says nothing of a save: its write is over, or has not begun (torch.save
        # serializes before it writes).
        lines.append("main process writing nothing over the last seconds: the save's write is over, or not begun")
    return Candidate("checkpoint_save", share, lines, [
        "Save less often, or only what a restart needs (model and optimizer state, not every buffer).",
        ("Save asynchronously: torch.distributed.checkpoint.async_save, or copy the state_dict to CPU and "
        "write it from a background thread or process."),
        "Write to local NVMe first and copy to shared storage in the background.",
    ])


RULE = Rule(concludes=(CHECKPOINT_SAVE,), evaluate=evaluate)
