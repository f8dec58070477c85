"""Marks for tests that need an optional part: torch is the probe extra's, not gputop's own, so on a Python whose
torch wheel is not at hand (CI's unit layer on the oldest and newest supported Pythons) those tests skip and say so."""

from __future__ import annotations

import importlib.util

import pytest

HAS_TORCH = importlib.util.find_spec("torch") is not None

needs_torch = pytest.mark.skipif(not HAS_TORCH,
                                 reason="torch is not installed (the probe extra: pip install -e '.[probe]')")
