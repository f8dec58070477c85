"""A process that sleeps in the kernel (state S, no CPU) with no Python stack to be stuck in is "sleeping", not
"HUNG" (issue 20: `gputop --pid` on a `sleep` said "HUNG 92%"). Real processes, real py-spy, the real CLI; a real
Python deadlock beside them stays hung, so the new word cannot swallow the hangs gputop exists to find."""

from __future__ import annotations


def test_sleeping_has_words_of_its_own_on_screen():
    from tui.panes.text import liveness_words

    assert liveness_words("sleeping") == "sleeping"
    assert liveness_words("hung") == "HUNG"
