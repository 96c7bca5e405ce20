"""Canonical JSON: one text per value, so equal payloads compare and hash equal.

Used wherever a value's *identity* matters rather than its looks: idempotency keys and
fingerprints (the runner, the stores), the stored results and approval records (the stores
keep JSON text, so a replay is a fresh copy), and transcript signatures (the demo agent).
:func:`json_text` is the same JSON for people to read (transcripts, widgets, the CLI).
"""

from __future__ import annotations

import hashlib
import json
import json.encoder
from collections.abc import Callable
from typing import Any

__all__ = ["canonical_json", "encoder", "fingerprint_of", "json_text"]


def _not_json(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def encoder(
    *, sort_keys: bool = False, separators: tuple[str, str] = (", ", ": "),
    check_circular: bool = True, allow_nan: bool = False,
) -> Callable[[Any], str]:
    """A function giving ``json.dumps(value, ensure_ascii=False, …)``'s text,
    made once: it calls the C encoder directly (``json.dumps`` with options, and
    ``JSONEncoder.encode``, rebuild it at every call). Raises ``TypeError``/``ValueError``
    as they do (a value JSON cannot hold, NaN, an int too long for ``str``).

    ``check_circular=False`` is for values known to be acyclic (a copy of bounded depth):
    a cycle then ends in ``RecursionError`` instead of ``ValueError``.
    """
    item, key = separators
    make = getattr(json.encoder, "c_make_encoder", None)
    quote = getattr(json.encoder, "c_encode_basestring", None)
    if make is None or quote is None:  # pragma: no cover - CPython always has the C encoder
        return json.JSONEncoder(
            ensure_ascii=False, allow_nan=allow_nan, sort_keys=sort_keys, separators=separators,
            check_circular=check_circular,
        ).encode
    if not check_circular:
        shared = make(None, _not_json, quote, None, key, item, sort_keys, False, allow_nan)
        return lambda value: "".join(shared(value, 0))

    def encode(value: Any) -> str:
        return "".join(make({}, _not_json, quote, None, key, item, sort_keys, False, allow_nan)(value, 0))

    return encode


_canonical = encoder(sort_keys=True, separators=(",", ":"), allow_nan=True)


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, non-ASCII kept as is: the same value always gives the same text.

    Raises ``TypeError``/``ValueError`` for what JSON cannot hold, as ``json.dumps`` does.
    """
    return _canonical(value)


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
