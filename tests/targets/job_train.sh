#!/bin/bash
# Target: a shell script that starts the training, as `bash train.sh` does: python job_train.py under bash.
# Usage: PYTHON=/path/to/python bash job_train.sh [job_train.py arguments...]
"${PYTHON:-python3}" "$(dirname "$0")/job_train.py" "$@"
status=$?
echo "training ended with status $status"
