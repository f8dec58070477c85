#!/usr/bin/env bash
# Brings karpathy/nanoGPT's files into .gpu_check/nanoGPT/ (git-ignored) for the GPU check
# (benchmarks/gpu_check.py, docs/benchmarks.md "The GPU check"). They travel to the GPU machine in the
# `device` tool's carry list and are never committed: nanoGPT is its author's code, run unmodified.
#
# In this workplace: call the `fetch` tool with source github:karpathy/nanoGPT; it answers with the path of a
# bare git directory (/work/.mirror/karpathy+nanoGPT/repo). Then, from the repository root:
#
#     bash benchmarks/fetch_nanogpt.sh [GIT_DIR]
#
# Elsewhere, with no GIT_DIR and no such mirror, it clones github.com/karpathy/nanoGPT instead.
# The H200 fixtures (tests/fixtures/h200/README.md) ran commit 3adf61e; it is taken where the history has it.
set -euo pipefail
cd "$(dirname "$0")/.."
COMMIT=3adf61e
DEST=.gpu_check/nanoGPT
GIT_DIR=${1:-/work/.mirror/karpathy+nanoGPT/repo}
if [ ! -d "$GIT_DIR" ]; then
    GIT_DIR=.gpu_check/nanoGPT.git
    [ -d "$GIT_DIR" ] || git clone --bare --quiet https://github.com/karpathy/nanoGPT "$GIT_DIR"
fi
REV=$COMMIT
git --git-dir="$GIT_DIR" cat-file -e "$COMMIT^{commit}" 2>/dev/null || REV=HEAD
rm -rf "$DEST"
mkdir -p "$DEST"
git --git-dir="$GIT_DIR" archive "$REV" | tar -x -C "$DEST"
git --git-dir="$GIT_DIR" rev-parse "$REV" > "$DEST/COMMIT"
echo "nanoGPT $(cut -c1-7 "$DEST/COMMIT") in $DEST ($(du -sh "$DEST" | cut -f1))"
