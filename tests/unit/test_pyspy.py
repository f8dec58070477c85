"""probes.sampling.pyspy against real processes with the real py-spy, plus its parsers on py-spy's real formats."""

from __future__ import annotations

import psutil
import pytest

from probes.sampling.pyspy_binary import explain_failure, find_pyspy

pytestmark = pytest.mark.skipif(find_pyspy() is None, reason="py-spy is not installed")

TEST_RATE_HZ = 20  # well above the default so short tests see enough samples


def test_permission_failure_says_what_to_do():
    # The message py-spy 0.4.3 printed when run as nobody against a root-owned Python process.
    kind, reason = explain_failure(
        psutil.Process().pid, "Permission Denied: Try running again with elevated permissions by going 'sudo'"
    )
    assert kind == "permission"
    assert "as root" in reason and "SYS_PTRACE" in reason and "ptrace_scope" in reason
