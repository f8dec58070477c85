"""The exit statuses of every gputop command, in one place so scripts can rely on them."""

EXIT_OK = 0
EXIT_INCOMPLETE = 1  # ran, but part of what was asked is missing (no reading taken, the recording stopped)
EXIT_USAGE = 2  # bad input: one line on stderr says what to do
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT
# gputop doctor (and nothing else): what gputop sees here is limited and has a fix (NVML denied, no PSI, ...; a
# machine without a GPU is a finding, exit 0), or it cannot see the target process's stacks at all (ptrace denied,
# py-spy missing, the PID not visible from this namespace).
EXIT_LIMITED = 3
EXIT_CANNOT_SEE = 4
EXIT_NO_JOB = 5  # `gputop` / `gputop --list` with no PID found no training job on this machine
