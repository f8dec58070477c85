"""Numbers as training logs print them, shared by the format parsers: a float that may read nan or inf, and a
rate in either direction (``2.00it/s`` or ``2.50s/it``) turned into seconds per iteration."""

from __future__ import annotations

NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf"  # a regex fragment; callers wrap it in a group


def number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def seconds_per_iter(rate: str, unit: str) -> float | None:
    """``unit`` is ``s/<thing>`` (seconds each) or ``<thing>/s`` (so many a second); None for ``?`` or 0."""
    value = number(rate)
    if value is None or value <= 0:
        return None
    return value if unit.startswith("s/") else 1.0 / value
