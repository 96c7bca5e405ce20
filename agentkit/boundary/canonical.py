"""Canonical JSON: one text per value, so equal payloads compare and hash equal.

Used wherever a value's *identity* matters rather than its looks: idempotency keys and
fingerprints (the runner, the stores), the stored results and approval records (the stores
keep JSON text, so a replay is a fresh copy), and transcript signatures (the demo agent).
:func:`json_text` is the same JSON for people to read (transcripts, widgets, the CLI).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["canonical_json", "fingerprint_of", "json_text"]


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, non-ASCII kept as is: the same value always gives the same text.

    Raises ``TypeError``/``ValueError`` for what JSON cannot hold, as ``json.dumps`` does.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def fingerprint_of(value: Any) -> str:
    """The payload's identity (sha256 hex of its canonical JSON): a reused key with another
    fingerprint is an ``idempotency_conflict``."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def json_text(
    value: Any, *, indent: int | None = None, compact: bool = False, canonical: bool = False
) -> str:
    """``value`` as JSON for people to read, non-ASCII kept; what JSON cannot hold is shown by
    its ``repr`` instead of raising. ``indent`` spreads it over lines, ``compact`` drops the
    spaces after ``,`` and ``:``, ``canonical`` gives :func:`canonical_json`'s text."""
    try:
        if canonical:
            return canonical_json(value)
        if compact:
            return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        return json.dumps(value, ensure_ascii=False, indent=indent)
    except (TypeError, ValueError):
        return repr(value)
