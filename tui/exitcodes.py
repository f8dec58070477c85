"""The exit statuses of every gputop command, in one place so scripts can rely on them."""

EXIT_OK = 0
EXIT_INCOMPLETE = 1  # ran, but part of what was asked is missing (no reading taken, the recording stopped)
EXIT_USAGE = 2  # bad input: one line on stderr says what to do
EXIT_NO_JOB = 3  # `gputop` / `gputop --list` with no PID found no training job on this machine
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT
