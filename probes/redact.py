"""Redaction: keeps tokens, keys, secrets and passwords out of everything gputop writes or shows.

Snapshots and recordings are made to be attached to bug reports, so a target's command line and
environment pass through here before they enter a Frame.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

REDACTED = "<redacted>"

# A name "looks secret" when one of its words is one of these (HF_TOKEN, WANDB_API_KEY, --api-key,
# AWS_SECRET_ACCESS_KEY, db_password, AUTH, ...). Words are split on -, _ and case changes.
_SECRET_WORDS = {"token", "key", "secret", "password", "passwd", "pwd", "auth", "credential", "credentials",
                 "apikey", "cookie", "session", "private", "signature", "pat"}
# Names that contain a secret word but are known not to carry one.
_HARMLESS_NAMES = {"keyboard", "monkey", "keys_sorted"}
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/@\s]+)@")


def name_looks_secret(name: str) -> bool:
    """True for HF_TOKEN, WANDB_API_KEY, --api-key, aws_secret_access_key, dbPassword, ..."""
    cleaned = name.lstrip("-").strip()
    if cleaned.lower() in _HARMLESS_NAMES:
        return False
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", cleaned)
    words = [w.lower() for w in re.split(r"[-_.\s]+", spaced) if w]
    return any(w in _SECRET_WORDS for w in words) or "apikey" in cleaned.lower().replace("-", "").replace("_", "")


def _scrub_value(value: str) -> str:
    """Hide user:password@ in URLs that sit inside any value."""
    return _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{REDACTED}@", value)


def redact_argv(argv: Iterable[str]) -> tuple[str, ...]:
    """A command line with the values of secret-looking options replaced.

    Handles `--api-key=VALUE`, `--api-key VALUE`, `HF_TOKEN=VALUE` (env-style assignments on the command
    line) and credentials in URLs.
    """
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        if "=" in arg:
            name = arg.partition("=")[0]
            if name_looks_secret(name):
                out.append(f"{name}={REDACTED}")
                continue
        elif arg.startswith("-") and name_looks_secret(arg):
            out.append(arg)
            hide_next = True
            continue
        out.append(_scrub_value(arg))
    return tuple(out)


def redact_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """Environment variables with secret-looking names' values replaced."""
    return {k: (REDACTED if name_looks_secret(k) else _scrub_value(v)) for k, v in environ.items()}
