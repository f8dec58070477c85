#!/usr/bin/env bash
# Downloads into .whl/ (git-ignored) the wheels the GPU check needs that the GPU machine lacks
# (/work/.library/device/KINDS.md lists what it has). benchmarks/gpu_check.sh installs them there into /tmp/site.
#
# Only py-spy: the machine has torch, numpy, nvidia-ml-py, psutil and prometheus-client, and headless gputop
# (`--snapshot`/`--record`/`--duration`, `probe --json`) never imports Textual. The check proves that on every run:
# it starts gputop with Textual's import refused (benchmarks/gpu_check.py GPUTOP).
#
#     bash benchmarks/fetch_wheels.sh [PY_SPY_VERSION]      # default: the py-spy this venv runs, else 0.4.3
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${1:-$(python3 -m pip show py-spy 2>/dev/null | sed -n 's/^Version: //p')}
VERSION=${VERSION:-0.4.3}
mkdir -p .whl
rm -f .whl/py_spy-*.whl
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "py-spy==$VERSION"
ls -la .whl
