"""A gzipped recording (how one goes into a bug report: about a tenth of the size) reads as the plain one does:
replay, its header, compare; one cut short mid-stream gives the whole frames before the cut and says so."""

from __future__ import annotations

import gzip

from support.h200 import H200, recording

from probes.compare import load_run
from probes.outputs.recording import load_recording, read_header

PACKED = H200 / "gpt2xl_s2.jsonl.gz"


def test_a_gzipped_recording_reads_as_the_plain_one(tmp_path):
    plain = load_recording(recording("gpt2xl_s2", tmp_path))
    packed = load_recording(PACKED)
    assert len(packed.frames) == len(plain.frames) == 40
    assert packed.frames == plain.frames and packed.skipped == ()
    assert read_header(PACKED) == read_header(tmp_path / "gpt2xl_s2.jsonl")


def test_gzip_is_told_by_its_bytes_not_its_name(tmp_path):
    renamed = tmp_path / "run.jsonl"
    renamed.write_bytes(PACKED.read_bytes())
    assert len(load_recording(renamed).frames) == 40


def test_a_gzipped_recording_cut_short_keeps_the_frames_before_the_cut(tmp_path):
    whole = gzip.decompress(PACKED.read_bytes())
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gzip.compress(whole)[: len(gzip.compress(whole)) // 2])
    loaded = load_recording(cut)
    assert 0 < len(loaded.frames) < 40
    assert loaded.skipped and "gzipped recording ends mid-stream" in loaded.skipped[-1].why


def test_compare_takes_a_gzipped_recording():
    run = load_run(str(PACKED), "A")
    assert run.kind == "recording" and run.seconds_per_iter is not None
