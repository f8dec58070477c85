#!/usr/bin/env bash
# The GPU check in one `device` run call (docs/benchmarks.md, "The GPU check"), from the repository root:
#
#     run  command:  GPU_CHECK_COMMIT=<commit> bash benchmarks/gpu_check.sh
#          carry:    [".gpu_check/nanoGPT", ".whl"]      timeout_s: 570
#
# It installs the carried wheels (.whl/: py-spy, benchmarks/fetch_wheels.sh) into /tmp/site, puts py-spy on PATH,
# and runs benchmarks/gpu_check.py (under 8 minutes), which writes fixtures.tar.gz, summary.json and summary.md
# to $OUT; this script adds run.log, the check's own output. Arguments go to gpu_check.py (--cases a,b reruns some).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/.gpu_check/out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || { echo "gpu_check.sh: the carried wheels did not install" | tee "$OUT/run.log"; exit 1; }
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH
fi
export PYTHONUNBUFFERED=1
set -o pipefail
python3 benchmarks/gpu_check.py --out "$OUT" "$@" 2>&1 | tee "$OUT/run.log"
