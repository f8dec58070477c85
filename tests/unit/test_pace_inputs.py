"""probes/reference/pace_inputs.py: the model, tokens per iteration, peak and baseline gputop resolved live travel in
the
recording's header and the snapshot, and come back as the same ComparisonInputs on replay, for every family; a
header from an older gputop (model name only) or a newer one (fields this one does not know) is read as far as it
honestly can be, never with a crash; the options given on replay win and are said."""

from __future__ import annotations

import dataclasses
import json

import pytest
from support.nanogpt_case import CASE_TOKENS, H200, gpu_bound_frames, nanogpt_reading, xl_probe_on_h200

from probes.models import FAMILIES
from probes.models.stated import StatedModel
from probes.monitoring.monitor import Monitor, recording_meta
from probes.outputs.recording import Recorder, read_header
from probes.reference.baseline import ComparisonInputs, PeakOptions, compare_progress, load_comparison_inputs
from probes.reference.pace_inputs import pace_inputs_document, recorded_inputs, replayed_comparison_inputs


def through_json(inputs: ComparisonInputs, **header) -> ComparisonInputs | None:
    """The inputs as a recording's header carries them (written as JSON, read back), folded as replay does."""
    document = json.loads(json.dumps({**header, "pace_inputs": pace_inputs_document(inputs)}))
    return replayed_comparison_inputs(recorded_inputs(document), None, None, None)


@pytest.mark.parametrize("family", FAMILIES, ids=lambda family: family.name)
def test_every_familys_shape_comes_back_with_the_same_mfu(family):
    name, shape = next(iter(family.presets.items()))
    live = ComparisonInputs(shape=shape, model=name, tokens_per_iter=65_536, peak=PeakOptions(tflops=400.0),
                            stated_by=f"a config.json for {name}", tokens_source="its command line")
    replayed = through_json(live)
    assert replayed.shape == shape and replayed.tokens_per_iter == 65_536
    assert replayed.peak.tflops == 400.0
    reading = nanogpt_reading(2.0, None)
    assert compare_progress(reading, replayed).corrected_mfu_pct == compare_progress(reading, live).corrected_mfu_pct
    assert replayed.stated_by == f"a config.json for {name}, as recorded"
    assert replayed.tokens_source == "its command line, as recorded"


def test_the_baseline_travels_with_its_path():
    probe = xl_probe_on_h200()
    live = load_comparison_inputs(None, None, CASE_TOKENS, baseline=probe)
    live = dataclasses.replace(live, baseline_path="/home/user/xl.json")
    replayed = through_json(live)
    assert replayed.baseline == probe and replayed.baseline_path == "/home/user/xl.json"
    assert replayed.stated_by is None  # the shape was the baseline's own
    assert compare_progress(nanogpt_reading(), replayed, H200).compute_bound_pct == pytest.approx(100 * 20.4 / 21)


def test_a_recorder_writes_it_and_the_header_reads_back(tmp_path):
    shape = FAMILIES[0].presets["gpt2-xl"]
    stated = StatedModel(shape, "nanoGPT", "nanoGPT's command line: config/xl.py", 131_072, "its command line")
    live = load_comparison_inputs(None, None, None, stated=stated)
    path = tmp_path / "run.jsonl"
    monitor = Monitor(comparison=live, recorder=Recorder(path, meta=recording_meta(1, 5.0, live)))
    for frame in gpu_bound_frames(2):
        monitor.ingest(frame)
    monitor.close()
    assert monitor.snapshot()["pace_inputs"] == read_header(path)["pace_inputs"]
    assert read_header(path)["pace_inputs"]["flops_per_token"] == FAMILIES[0].flops_per_token(shape)
    assert through_json(live).shape == shape


def test_older_headers_give_what_they_can():
    preset = replayed_comparison_inputs(recorded_inputs({"model": "gpt2-xl", "tokens_per_iter": CASE_TOKENS}),
                                        None, None, None)
    assert preset.shape == FAMILIES[0].presets["gpt2-xl"] and preset.tokens_per_iter == CASE_TOKENS
    named = replayed_comparison_inputs(recorded_inputs({"model": "nanoGPT", "tokens_per_iter": 131_072}),
                                       None, None, None)
    assert named.shape is None and named.tokens_per_iter == 131_072
    lines = compare_progress(dataclasses.replace(nanogpt_reading(2.56, 168.77), format="generic"), named, H200).lines
    assert "No MFU: the recording names the model nanoGPT but not its shape" in lines[2]
    # nanoGPT's log counted the FLOPs itself: its printed mfu, re-based to the H200, and why gputop's count is missing.
    lines = compare_progress(nanogpt_reading(2.56, 168.77), named, H200).lines
    assert lines[2].startswith("MFU 53.2% by nanoGPT's own FLOP count")
    assert "needs the shape: the recording names the model nanoGPT but not its shape" in lines[2]
    assert replayed_comparison_inputs(recorded_inputs({"pid": 1}), None, None, None) is None
    assert replayed_comparison_inputs(recorded_inputs(None), None, None, None) is None


@pytest.mark.parametrize("document", [
    {"version": 9, "family": "mamba", "shape": {"d_state": 16}, "tokens_per_iter": 8},
    {"family": "gpt2", "shape": {"n_layer": "48"}, "tokens_per_iter": -1, "peak": "fast"},
    {"family": "gpt2", "shape": {"n_layer": 2, "n_head": 3, "n_embd": 64, "block_size": 8, "vocab_size": 9}},
    {"family": "gpt2", "shape": [1, 2], "baseline": {"schema": "gputop.probe/1"}, "flops_per_token": "many"},
    {"model": 7, "shape_from": None, "peak": {"tflops": float("inf"), "dtype": "fp64", "gpu": 3}},
])
def test_what_cannot_be_read_is_said_never_raised(document):
    inputs = replayed_comparison_inputs(recorded_inputs({"pace_inputs": document}), None, None, None)
    if inputs is not None:
        assert inputs.shape is None
        lines = compare_progress(nanogpt_reading(), inputs, H200).lines
        assert any("pass --model" in line for line in lines)


def test_options_given_on_replay_win_and_are_said():
    shape = FAMILIES[0].presets["gpt2-xl"]
    stated = StatedModel(shape, "nanoGPT", "nanoGPT's command line", 131_072, "its command line")
    recorded = recorded_inputs({"pace_inputs": pace_inputs_document(load_comparison_inputs(None, None, None,
                                                                                         stated=stated))})
    given = replayed_comparison_inputs(recorded, None, "gpt2", 4096, PeakOptions(dtype="fp16"))
    assert given.shape == FAMILIES[0].presets["gpt2"] and given.tokens_per_iter == 4096
    assert given.peak.dtype == "fp16"
    assert any(note.startswith("--model gpt2 is used, not the shape of nanoGPT's command line, as recorded")
               for note in given.notes)
    assert "--tokens-per-iter 4,096 is used, not the 131,072 of its command line, as recorded." in given.notes
