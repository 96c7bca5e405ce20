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

__all__ = [
    "approval_text", "canonical_json", "encoder", "escape_invisible", "fingerprint_of",
    "intent_json", "json_text", "quote_json",
]


#: A str as JSON text, non-ASCII kept (``json.dumps(text, ensure_ascii=False)``), in C.
quote_json: Callable[[str], str] = getattr(json.encoder, "c_encode_basestring", None) or json.encoder.py_encode_basestring


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


def intent_json(value: Any) -> str:
    """:func:`canonical_json` of a call's arguments as one intent: numbers equal in value are
    written alike (``5`` and ``5.0`` are one amount, so one key), while ``true`` stays apart
    from ``1`` (a bool is not a number to the model's schema). The runner's default
    idempotency key and a write's fingerprint are made from this text."""
    text = _canonical(value)
    # A float equal to an int is written "5.0", "-0.0" or "1e+16": without ".0" or "e+" in
    # the text there is none (the usual case, decided without walking the value).
    if ".0" not in text and "e+" not in text:
        return text
    return _canonical(_numbers_by_value(value))


def _numbers_by_value(value: Any) -> Any:
    """``value`` with every float that equals an int (``5.0``, ``-0.0``) made that int."""
    if isinstance(value, float):
        return int(value) if value.is_integer() else value  # (never for NaN or infinity)
    if isinstance(value, dict):
        return {key: _numbers_by_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_numbers_by_value(item) for item in value]
    return value


def fingerprint_of(value: Any) -> str:
    """The payload's identity (sha256 hex of its canonical JSON): a reused key with another
    fingerprint is an ``idempotency_conflict``."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def json_text(
    value: Any, *, indent: int | None = None, compact: bool = False, canonical: bool = False,
    sort_keys: bool = False,
) -> str:
    """``value`` as JSON for people to read, non-ASCII kept; what JSON cannot hold is shown by
    its ``repr`` instead of raising. ``indent`` spreads it over lines, ``compact`` drops the
    spaces after ``,`` and ``:``, ``canonical`` gives :func:`canonical_json`'s text,
    ``sort_keys`` sorts the keys."""
    try:
        if canonical:
            return canonical_json(value)
        if compact:
            return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=sort_keys)
        return json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=sort_keys)
    except (TypeError, ValueError, RecursionError):
        return repr(value)


# ---------------------------------------------------------------- what a person is shown

#: Characters ``str.isprintable`` accepts that still show nothing (or reorder nothing but
#: hide): combining grapheme joiner, Hangul fillers, Khmer inherent vowels, Mongolian free
#: variation selectors, the Braille blank, variation selectors.
_BLANK = frozenset(
    [chr(c) for c in (0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180C, 0x180D, 0x180F,
                      0x3164, 0xFFA0, 0x2800)]
    + [chr(c) for c in range(0xFE00, 0xFE10)]
    + [chr(c) for c in range(0xE0100, 0xE01F0)]
)


def _escaped(char: str) -> str:
    code = ord(char)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # as JSON writes it: a surrogate pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def escape_invisible(text: str) -> str:
    """``text`` with every character a person cannot see, or that changes how the rest
    reads, written as its ``\\uXXXX`` escape: bidi overrides and isolates (U+202E, U+2066 …),
    zero-width characters (U+200B, U+200D, U+2060, U+FEFF), other format and control
    characters, line and paragraph separators, spaces other than " ", unassigned and private
    code points, lone surrogates, and the blank characters in :data:`_BLANK`.

    Applied to JSON text the result is still JSON for the same value (JSON reads ``\\u202e``
    as U+202E, and a backslash the value holds is already written ``\\\\``), so what a person
    approves is exactly what runs, and a look-alike cannot hide in it.
    """
    if text.isprintable() and _BLANK.isdisjoint(text):
        return text
    return "".join(
        char if char.isprintable() and char not in _BLANK else _escaped(char) for char in text
    )


def approval_text(arguments: Any) -> str:
    """The arguments of a call as a person approving it sees them, whole: JSON with sorted
    keys, non-ASCII letters kept, and every invisible or reordering character escaped
    (:func:`escape_invisible`). The CLI, the MCP elicitation and the notebook panel all show
    this text."""
    return escape_invisible(json_text(arguments, canonical=False, sort_keys=True))
