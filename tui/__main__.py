"""`python -m tui` runs the gputop command."""

from tui.cli import main

if __name__ == "__main__":
    main()
