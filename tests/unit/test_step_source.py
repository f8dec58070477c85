"""The step facts hold wherever they are read (issue 29's principle for issue 30's StepFacts): what a live run read of
the job's source travels in its recording (probes/diagnosis/step_source.py), a replay takes it where this machine
cannot read the lines, and a line read here stands; a job's verdict carries the step facts of the rank it speaks for;
step_facts counts each frame once, so a tick's call does not grow with the look-back. The real round trip, a job's
file moved away before its replay, is tests/e2e/test_step_facts_replay_e2e.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from support.frames import FORWARD, PID, fr, main_count, make_frame
from support.job_frames import run_job, straggler_frames
from support.work import lines_run

from probes.diagnosis.evidence import gather
from probes.diagnosis.gpu_summary import GpuSummary
from probes.diagnosis.step_facts import step_facts
from probes.diagnosis.step_source import RECORDED_WHERE, RECORDING_KEY, stack_digest
from probes.frame import Frame, to_jsonable
from probes.outputs.recording import Recorder, json_line, load_recording, recording_header

MODEL = '''import torch


class CausalSelfAttention(torch.nn.Module):
    def forward(self, x):
        att = (q @ k.transpose(-2, -1)) * self.scale
        att = att.masked_fill(self.bias == 0, float("-inf"))
        return att @ v
'''
MASKED_FILL_LINE = 7
BY_HAND_WHERE = "CausalSelfAttention.forward (model.py:7): masked_fill written out"


def attention_stack(path: str) -> tuple:
    return (fr("CausalSelfAttention.forward", path, MASKED_FILL_LINE),) + FORWARD[1:]


def frames_with(stack, n: int = 3) -> list[Frame]:
    return [make_frame(i, counts=[main_count(stack, 4), main_count(FORWARD, 2)]) for i in range(n)]


def write_recording(path: Path, frames: list[Frame], carried: dict[int, dict]) -> Path:
    """A recording as a live run on another machine wrote it: `carried[i]` rides on frame i's line."""
    lines = [json_line(recording_header({"pid": PID}))]
    for i, frame in enumerate(frames):
        line = to_jsonable(frame)
        if i in carried:
            line[RECORDING_KEY] = carried[i]
        lines.append(json_line(line))
    path.write_text("".join(lines))
    return path


GENERATED = """def call(args):
    buf0 = empty_strided_cpu((64, 128), (128, 1), torch.bfloat16)
    buf1 = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(buf0, buf0, buf0)
"""


def generated_stack(path: str) -> tuple:
    return (fr("Runner.call", path, 3), fr("CompiledFxGraph.__call__", "/opt/venv/lib/python3.11/site-packages/torch/"
                                                                      "_inductor/output_code.py", 460)) + FORWARD[2:]


def test_a_live_recording_carries_what_a_stack_s_lines_said_once(tmp_path):
    model = tmp_path / "job" / "model.py"
    model.parent.mkdir()
    model.write_text(MODEL)
    code = tmp_path / "torchinductor_alice" / "ab" / f"cab{'w' * 48}.py"
    code.parent.mkdir(parents=True)
    code.write_text(GENERATED)
    stack = attention_stack(str(model))
    recorder = Recorder(tmp_path / "run.jsonl")
    for frame in frames_with(stack):
        frame = dataclasses.replace(frame, stacks=dataclasses.replace(frame.stacks, counts=(
            *frame.stacks.counts, main_count(generated_stack(str(code)), 1))))
        assert recorder.append(frame)
    recorder.close()
    lines = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()[1:]]
    carried = [line.get(RECORDING_KEY) for line in lines]
    assert carried[1:] == [None, None]  # each stack and file once
    assert carried[0]["stacks"] == {stack_digest(stack): {
        "marks": {"attention": ["by_hand", "source", BY_HAND_WHERE]}, "read": True}}
    assert carried[0]["files"] == {str(code): {"attention": "sdpa", "attention_op": "aten._scaled_dot_product_flash_"
                                               "attention_for_cpu", "dtypes": [["bfloat16", 1]]}}
    recording = load_recording(tmp_path / "run.jsonl")
    assert len(recording.frames) == 3 and recording.skipped == ()


def test_a_replay_where_the_job_s_file_is_not_says_what_the_recording_machine_read(tmp_path):
    gone = str(tmp_path / "elsewhere" / "model.py")  # never on this machine
    stack = attention_stack(gone)
    entry = {"stacks": {stack_digest(stack): {"marks": {"attention": ["by_hand", "source", BY_HAND_WHERE]},
                                              "read": True}}, "files": {}}
    frames = load_recording(write_recording(tmp_path / "run.jsonl", frames_with(stack), {0: entry})).frames
    found = gather(list(frames), 5.0).step
    assert (found.attention.value, found.attention.origin, found.attention.samples) == ("by_hand", "source", 12)
    assert found.attention.where == BY_HAND_WHERE + RECORDED_WHERE
    assert found.unread == ()  # the recording machine read that file
    assert f"attention by_hand (source: {BY_HAND_WHERE} (read on the recording machine) in 12 of 18 main-thread " \
           "samples)" in found.lines()
    # A recording written before carries nothing: the file stays unread and its lines unknown, as before.
    older = attention_stack(str(tmp_path / "older" / "model.py"))
    frames = load_recording(write_recording(tmp_path / "old.jsonl", frames_with(older), {})).frames
    found = gather(list(frames), 5.0).step
    assert found.attention is None and found.unread == (older[0].file,)


def test_a_line_read_here_stands_over_the_recorded_one(tmp_path):
    model = tmp_path / "model.py"
    model.write_text(MODEL)
    stack = attention_stack(str(model))
    entry = {"stacks": {stack_digest(stack): {"marks": {
        "attention": ["sdpa", "source", "CausalSelfAttention.forward (model.py:7) calls scaled_dot_product_attention"],
        "non_blocking": ["on", "source", "CausalSelfAttention.forward (model.py:7) copies with non_blocking=True"]},
        "read": True}}, "files": {}}
    frames = load_recording(write_recording(tmp_path / "run.jsonl", frames_with(stack), {0: entry})).frames
    found = gather(list(frames), 5.0).step
    assert (found.attention.value, found.attention.where) == ("by_hand", BY_HAND_WHERE)  # read here: it stands
    assert found.non_blocking.where.endswith(RECORDED_WHERE)  # a line this machine read nothing from


def test_generated_code_not_here_is_read_from_the_recording(tmp_path):
    path = str(tmp_path / "torchinductor_alice" / "ab" / f"cab{'z' * 48}.py")
    stack = generated_stack(path)
    entry = {"stacks": {}, "files": {path: {"attention": "sdpa", "attention_op": "aten._scaled_dot_product_flash_"
                                            "attention", "dtypes": [["bfloat16", 2], ["float32", 1]]}}}
    frames = load_recording(write_recording(tmp_path / "run.jsonl", frames_with(stack), {0: entry})).frames
    found = gather(list(frames), 5.0).step
    assert (found.attention.value, found.attention.origin) == ("sdpa", "generated code")
    assert found.attention.where == "cabzzzzz….py calls aten._scaled_dot_product_flash_attention" + RECORDED_WHERE
    assert found.compute_dtype.value == "bfloat16" and found.compute_dtype.where.endswith(RECORDED_WHERE)
    assert path not in found.unread


def test_what_this_gputop_does_not_understand_of_it_is_left_out(tmp_path):
    stack = attention_stack(str(tmp_path / "nowhere" / "model.py"))
    damaged = {0: {"stacks": {"x": 5, stack_digest(stack): {"marks": {"attention": ["by_hand"]}}}},
               1: "not an object", 2: {"files": {"/a.py": {"dtypes": "none"}}}}
    recording = load_recording(write_recording(tmp_path / "run.jsonl", frames_with(stack), damaged))
    assert len(recording.frames) == 3 and recording.skipped == ()
    assert gather(list(recording.frames), 5.0).step.attention is None


def test_a_job_s_verdict_carries_the_step_facts_of_the_rank_it_speaks_for():
    """The straggler's advice is its own, checked against its own facts: those are the job's verdict.step (a
    merge of both ranks' would count samples of no one process and show facts no lever was checked against)."""
    job = run_job(straggler_frames(8))[-1]
    ranks = {r.rank: r for r in job.ranks}
    assert (job.finding, job.responsible_rank) == ("straggler", 1)
    assert job.verdict.step == ranks[1].verdict.step != ()
    assert ranks[0].verdict.step != ranks[1].verdict.step
    assert job.verdict.step[0] == \
        "eager (stacks: Linear.forward (torch/nn/modules/linear.py:134) in 8 of 80 main-thread samples)"


def test_each_frame_is_counted_once_so_a_tick_costs_the_same_on_any_history():
    """A call looks back over a bounded window, and sums one tally per frame of it: the new frame's stacks are
    counted, the others' were counted on their own tick, so a tick's work grows neither with the History's length
    nor with how many stacks the window's frames hold. Counted in Python lines run, not timed
    (tests/support/work.py)."""
    no_gpu = GpuSummary(available=False)

    def frames_of(length: int, stacks: int) -> list[Frame]:
        return [make_frame(i, counts=[main_count((fr("helper", "/home/alice/nanogpt/util.py", 10 + j),) + FORWARD, 1)
                                      for j in range(stacks)]) for i in range(length)]

    def first_call(length: int) -> int:
        history = frames_of(length, 2)
        return lines_run(lambda: step_facts(history, PID, no_gpu))

    ten_minutes, twenty_minutes = first_call(600), first_call(1200)
    assert twenty_minutes <= ten_minutes * 1.02, (ten_minutes, twenty_minutes)

    def next_tick(stacks: int) -> int:
        """A tick whose new frame holds 2 stacks, after 60 frames of `stacks` each."""
        history = frames_of(60, stacks) + frames_of(61, 2)[60:]
        step_facts(history[:60], PID, no_gpu)  # the ticks before
        return lines_run(lambda: step_facts(history, PID, no_gpu))

    few, many = next_tick(2), next_tick(20)
    assert many <= few * 1.1, (few, many)  # the window's older frames are not counted again
