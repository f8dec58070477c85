"""Regenerate screenshots/*.svg by replaying the recordings in tests/fixtures/recordings in the app, and by
showing `gputop compare A B --tui` of two fixture recordings.

Screenshots are never drawn by hand: each is the app showing a recording of a real run, with the clock
frozen 2 s after the last frame so "since" texts do not depend on when this runs.

    python scripts/export_screenshots.py            # all of them
    python scripts/export_screenshots.py --check    # exit 1 if any screenshot is out of date

A recording listed below that does not exist yet is skipped with a note. Make one with
`gputop --pid PID --record tests/fixtures/recordings/NAME.jsonl --duration 8`; the GPU-bound one needs a
machine with an NVIDIA GPU (for example tui/demo_target.py --phases compute there).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from probes.compare import compare_runs, load_run  # noqa: E402
from probes.outputs.recording import read_header, read_recording  # noqa: E402
from probes.reference.baseline import load_comparison_inputs  # noqa: E402
from probes.reference.pace_inputs import recorded_inputs, replayed_comparison_inputs  # noqa: E402
from tui.app import make_app  # noqa: E402
from tui.compare_app import make_compare_app  # noqa: E402

RECORDINGS = REPO / "tests" / "fixtures" / "recordings"
CONSTRUCTED = REPO / "tests" / "fixtures" / "frames"  # built by make_gpu_frames.py / make_job_frames.py
SCREENSHOTS = REPO / "screenshots"
SECONDS_AFTER_LAST_FRAME = 2.0

# The seed case's comparison: `gputop replay ... --model gpt2-xl --tokens-per-iter 1048576`.
SEED_CASE = ("gpt2-xl", 1_048_576)

# The real runs on an H200 (tests/fixtures/h200/README.md), replayed as `gputop replay FILE --baseline PROBE` shows
# them: the recording's own header, and the compiled probe of GPT-2 XL on the same GPU as the reference.
H200 = REPO / "tests" / "fixtures" / "h200"
H200_REFERENCE = ("baseline", str(H200 / "gpt2xl_probe_compile.json"))

# (recording, screenshot, terminal size, keys pressed before the picture, what the pace is compared with:
# (model, tokens per iteration) as --model and --tokens-per-iter, or ("baseline", PROBE.json) beside the header's)
SHOTS = (
    (RECORDINGS / "data_bound.jsonl", "data-bound.svg", (160, 48), (), None),
    (RECORDINGS / "data_bound.jsonl", "data-bound-80x24.svg", (80, 24), (), None),
    (RECORDINGS / "data_bound.jsonl", "data-bound-call-tree.svg", (160, 48), ("enter",), None),
    (RECORDINGS / "hung.jsonl", "hung.svg", (160, 48), (), None),
    (RECORDINGS / "hung.jsonl", "hung-now.svg", (160, 48), ("d",), None),
    (RECORDINGS / "gpu_bound.jsonl", "gpu-bound.svg", (160, 48), (), None),
    (CONSTRUCTED / "h200_gpu_bound.jsonl", "seed-case-h200-pace.svg", (160, 48), (), SEED_CASE),
    (CONSTRUCTED / "h200_gpu_bound.jsonl", "seed-case-h200-pace-80x24.svg", (80, 24), (), SEED_CASE),
    # nanoGPT's own train.py, GPT-2 XL on a real H200: steady state against the compiled probe, and its first compile.
    (H200 / "gpt2xl_s2.jsonl.gz", "h200-gpt2xl.svg", (160, 48), (), H200_REFERENCE),
    (H200 / "gpt2xl_s2.jsonl.gz", "h200-gpt2xl-80x24.svg", (80, 24), (), H200_REFERENCE),
    (H200 / "gpt2xl_s1.jsonl.gz", "h200-gpt2xl-first-compile.svg", (160, 48), (), None),
    # A 2-rank torchrun job whose rank 1 is slow, with rank 1 selected (`[` from "all ranks").
    (CONSTRUCTED / "ddp_straggler.jsonl", "ddp-straggler.svg", (160, 48), ("left_square_bracket",), None),
    (CONSTRUCTED / "ddp_straggler.jsonl", "ddp-straggler-80x24.svg", (80, 24), ("left_square_bracket",), None),
)

COMPARE = REPO / "tests" / "fixtures" / "compare"  # two real runs of the seed case, scaled down (its README)
# `gputop compare A B --label LABELS --tui`: (A, B, labels, screenshot, terminal size)
COMPARE_SHOTS = (
    (COMPARE / "narrow.jsonl", COMPARE / "wide.jsonl", ("narrow", "wide"), "compare-narrow-wide.svg", (160, 48)),
    (COMPARE / "narrow.jsonl", COMPARE / "wide.jsonl", ("narrow", "wide"), "compare-narrow-wide-80x24.svg",
     (80, 24)),
)


async def render(recording: Path, size: tuple[int, int], keys: tuple[str, ...], compare) -> str:
    frames = list(read_recording(recording))
    frozen = frames[-1].time + SECONDS_AFTER_LAST_FRAME
    if compare and compare[0] == "baseline":
        comparison = replayed_comparison_inputs(recorded_inputs(read_header(recording)), compare[1], None, None)
    else:
        comparison = load_comparison_inputs(None, *compare) if compare else None
    app = make_app(replay_frames=frames, clock=lambda: frozen, comparison=comparison)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        if keys:
            await pilot.press(*keys)
            await pilot.pause()
        return app.export_screenshot(title=f"gputop replay {recording.name}")


async def render_compare(a: Path, b: Path, labels: tuple[str, str], size: tuple[int, int]) -> str:
    # Paths relative to the repository, as a person types them: the header shows them.
    runs = [load_run(str(path.relative_to(REPO)), label) for path, label in zip((a, b), labels, strict=True)]
    app = make_compare_app(compare_runs(*runs))
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        return app.export_screenshot(title=f"gputop compare {a.name} {b.name} --tui")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report screenshots that would change")
    args = parser.parse_args()
    SCREENSHOTS.mkdir(exist_ok=True)
    # (screenshot, the recordings it shows, its size, what draws it), replays first, then comparisons
    pictures = [(name, (recording,), size, partial(render, recording, size, keys, compare))
                for recording, name, size, keys, compare in SHOTS]
    pictures += [(name, (a, b), size, partial(render_compare, a, b, labels, size))
                 for a, b, labels, name, size in COMPARE_SHOTS]
    stale = []
    os.chdir(REPO)  # the comparison's header names its recordings relative to here
    for screenshot_name, recordings, size, draw in pictures:
        missing = [path for path in recordings if not path.exists()]
        if missing:
            print(f"skipped {screenshot_name}: no recording {missing[0].relative_to(REPO)} yet")
            continue
        svg = asyncio.run(draw())
        target = SCREENSHOTS / screenshot_name
        if target.exists() and target.read_text(encoding="utf-8") == svg:
            print(f"unchanged {target.relative_to(REPO)}")
            continue
        stale.append(target)
        if not args.check:
            target.write_text(svg, encoding="utf-8")
            shown = " and ".join(str(path.relative_to(REPO)) for path in recordings)
            print(f"wrote {target.relative_to(REPO)} from {shown} at {size[0]}x{size[1]}")
    if args.check and stale:
        print("out of date: " + ", ".join(str(p.relative_to(REPO)) for p in stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
