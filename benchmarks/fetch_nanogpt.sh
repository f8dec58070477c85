#!/usr/bin/env bash
# Writes karpathy/nanoGPT's model.py, train.py, configurator.py and LICENSE into benchmarks/nanogpt/ (vendored,
# committed: the GPU check runs them in CI's dry run and on a lent GPU without a network) from the pinned commit.
#
#     bash benchmarks/fetch_nanogpt.sh GIT_DIR     # a clone or bare git directory of karpathy/nanoGPT
#     bash benchmarks/fetch_nanogpt.sh             # clones github.com/karpathy/nanoGPT into a temporary directory
#
# In this workplace the `fetch` tool (source github:karpathy/nanoGPT) answers with such a git directory. A git
# directory without the pinned commit fails with a line that says so: no other commit is taken in its place.
set -euo pipefail
cd "$(dirname "$0")/.."
COMMIT=3adf61e154c3fe3fca428ad6bc3818b27a3b8291  # benchmarks/nanogpt/README.md; the H200 fixtures' commit
DEST=benchmarks/nanogpt
FILES=(model.py train.py configurator.py LICENSE)
if [ $# -ge 1 ]; then
    GIT_DIR=$1
    [ -d "$GIT_DIR" ] || { echo "fetch_nanogpt.sh: no git directory at $GIT_DIR" >&2; exit 1; }
else
    GIT_DIR=$(mktemp -d)/nanoGPT.git
    git clone --bare --quiet https://github.com/karpathy/nanoGPT "$GIT_DIR" \
        || { echo "fetch_nanogpt.sh: could not clone github.com/karpathy/nanoGPT; pass a git directory" >&2; exit 1; }
fi
if ! git --git-dir="$GIT_DIR" cat-file -e "$COMMIT^{commit}" 2>/dev/null; then
    echo "fetch_nanogpt.sh: commit $COMMIT is not in $GIT_DIR: fetch it there, or give a git directory that has it" >&2
    exit 1
fi
mkdir -p "$DEST"
for name in "${FILES[@]}"; do
    git --git-dir="$GIT_DIR" show "$COMMIT:$name" > "$DEST/$name"
done
echo "nanoGPT ${COMMIT:0:7}: ${FILES[*]} in $DEST"
