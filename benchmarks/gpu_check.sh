#!/usr/bin/env bash
# The GPU check in one `device` run call (docs/benchmarks.md, "The GPU check"), from the repository root:
#
#     run  command:  GPU_CHECK_COMMIT=<commit> bash benchmarks/gpu_check.sh
#          carry:    [".whl"]      timeout_s: 590
#
# benchmarks/gpu_check.py first runs its preflight (what is missing, one line each: the NVML binding, psutil,
# py-spy, nanoGPT's vendored files, GPU 0's free memory), installing what is missing into /tmp/site from PyPI where
# pypi.org answers, else from the carried wheels in .whl/ (benchmarks/fetch_wheels.sh); then the cases, within 560 s.
# It writes fixtures.tar.gz, summary.json and summary.md to $OUT; this script adds run.log, the check's own output.
# Arguments go to gpu_check.py (--cases a,b reruns some).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/.gpu_check/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
set -o pipefail
python3 benchmarks/gpu_check.py --out "$OUT" "$@" 2>&1 | tee "$OUT/run.log"
