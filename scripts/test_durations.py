"""Write tests/support/durations.json from the `--durations=0` report of a pytest run: each end-to-end test's
seconds (setup, call and teardown together), which tests/conftest.py uses to hand out the longest first.

Usage: python -m pytest tests/e2e --durations=0 -q | tee run.log; python scripts/test_durations.py run.log

The figures are an order, not a promise: a stale or missing entry only makes the run's tail longer.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "support" / "durations.json"
LINE = re.compile(r"^(\d+(?:\.\d+)?)s (?:setup|call|teardown)\s+(tests/\S+)$")


def main(log: str) -> None:
    seconds: dict[str, float] = defaultdict(float)
    for line in Path(log).read_text(errors="replace").splitlines():
        found = LINE.match(line.strip())
        if found:
            seconds[found.group(2)] += float(found.group(1))
    OUT.write_text(json.dumps({k: round(v, 1) for k, v in sorted(seconds.items())}, indent=0) + "\n")
    print(f"{len(seconds)} tests written to {OUT}")


if __name__ == "__main__":
    main(sys.argv[1])
