#!/usr/bin/env bash
# Downloads into .whl/ (git-ignored) the wheels the GPU check installs where the GPU machine lacks them and cannot
# reach PyPI (the `device` tool's machines reach nothing outside): py-spy, psutil and nvidia-ml-py (the NVML binding;
# torch brings neither it nor psutil). The check's preflight (benchmarks/gpu_check_preflight.py) installs only what is
# missing there, into /tmp/site, from PyPI where it answers and from these wheels where it does not.
#
#     bash benchmarks/fetch_wheels.sh [PY_SPY_VERSION]      # default: the py-spy this venv runs, else 0.4.3
#
# The wheels are for CPython 3.12 on x86-64 Linux, the GPU machine's Python (/work/.library/device/KINDS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${1:-$(python3 -m pip show py-spy 2>/dev/null | sed -n 's/^Version: //p')}
VERSION=${VERSION:-0.4.3}
mkdir -p .whl
rm -f .whl/py_spy-*.whl .whl/psutil-*.whl .whl/nvidia_ml_py-*.whl
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "py-spy==$VERSION" psutil nvidia-ml-py
ls -la .whl
