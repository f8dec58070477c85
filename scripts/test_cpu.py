"""Where a test run's CPU goes: sums the lines GPUTOP_TEST_CPU_LOG collected (tests/conftest.py) by file and by
test, most CPU first. With the cores the limit (the 2-core CI machine), a run takes about its CPU seconds over its
cores; this names what to make cheaper. Where the lines say when each test started and on which worker, it also
shows how many tests ran at once, minute by minute, and the tests that ended the run.

    GPUTOP_TEST_CPU_LOG=/tmp/cpu.tsv python -m pytest tests/e2e && python scripts/test_cpu.py /tmp/cpu.tsv
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--most", type=int, default=25, help="rows of each table (default 25)")
    args = parser.parse_args()
    by_test = {}
    spans = []  # (start, end, nodeid) where the log says when a test started
    for line in args.log.read_text().splitlines():
        nodeid, wall, cpu, *when = line.split("\t")
        by_test[nodeid] = (float(wall), float(cpu))
        if when:
            spans.append((float(when[0]), float(when[0]) + float(wall), nodeid))
    by_file = defaultdict(lambda: [0.0, 0.0, 0])
    for nodeid, (wall, cpu) in by_test.items():
        totals = by_file[nodeid.split("::")[0]]
        totals[0] += wall
        totals[1] += cpu
        totals[2] += 1
    wall_sum = sum(w for w, _ in by_test.values())
    cpu_sum = sum(c for _, c in by_test.values())
    print(f"{len(by_test)} tests: {wall_sum:.0f} s of test time, {cpu_sum:.0f} CPU s")
    print(f"\n{'CPU s':>7} {'wall s':>7} {'tests':>5}  file")
    for name, (wall, cpu, count) in sorted(by_file.items(), key=lambda kv: -kv[1][1])[:args.most]:
        print(f"{cpu:7.0f} {wall:7.0f} {count:5d}  {name}")
    print(f"\n{'CPU s':>7} {'wall s':>7}  test")
    for nodeid, (wall, cpu) in sorted(by_test.items(), key=lambda kv: -kv[1][1])[:args.most]:
        print(f"{cpu:7.1f} {wall:7.1f}  {nodeid}")
    if spans:
        _timeline(spans, args.most)


def _timeline(spans: list[tuple[float, float, str]], most: int) -> None:
    """Tests running at once, minute by minute (their mean over the minute), and the tests that ended last."""
    first, last = min(s for s, _, _ in spans), max(e for _, e, _ in spans)
    print(f"\nrun {last - first:.0f} s from the first test's start to the last one's end")
    print(f"{'minute':>6} {'running':>8}")
    minute = 0
    while first + 60 * minute < last:
        lo, hi = first + 60 * minute, min(last, first + 60 * (minute + 1))
        busy = sum(max(0.0, min(e, hi) - max(s, lo)) for s, e, _ in spans)
        print(f"{minute:6d} {busy / (hi - lo):8.1f}")
        minute += 1
    print(f"\n{'start s':>7} {'end s':>7}  ended last")
    for start, end, nodeid in sorted(spans, key=lambda span: -span[1])[:most]:
        print(f"{start - first:7.0f} {end - first:7.0f}  {nodeid}")


if __name__ == "__main__":
    main()
