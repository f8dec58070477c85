"""gputop's user-facing side: the `gputop` command, the Textual app and its panes, and exports."""
