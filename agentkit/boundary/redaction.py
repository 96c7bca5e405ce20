"""Redact/truncate: the stage between the raw result and what the model sees.

Order matters. Redaction runs first, so a secret is never cut in half with its first half
shown; truncation then keeps ``len(data) <= max_output_chars``. For a str result the work done
grows with ``max_output_chars``, not with the size of the result: only a window of the limit
plus a look-ahead is scanned, and any secret that starts inside the shown part and runs past
the window is still matched (every pattern matches a cut-off prefix of its secret).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

REDACTED = "[REDACTED]"

#: How far past the limit the scan looks, so a secret straddling the cut is seen whole.
#: A PEM private key block of a 4096-bit RSA key is about 3,300 characters.
LOOKAHEAD_CHARS = 8_192

# Patterns with a group named ``secret`` replace only that group ("Bearer [REDACTED]").
DEFAULT_PATTERNS: tuple[re.Pattern[str], ...] = (
    # PEM private key blocks; an unterminated block (cut by the window) is redacted to the end.
    re.compile(
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)"
    ),
    re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"),  # OpenAI-style keys (sk-..., sk-proj-...)
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),  # AWS access key ids
    re.compile(r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9._~+/=-]{8,})"),
    re.compile(
        r"(?i)\b(?:password|passwd|secret|token|api[_-]?key|access[_-]?key)\b[\"']?\s*[:=]\s*"
        r"[\"']?(?P<secret>[^\s\"'&,;}]+)"
    ),
)


class Redactor:
    """Replaces secrets with ``[REDACTED]`` and counts the spans replaced."""

    def __init__(self, extra: Iterable[str | re.Pattern[str]] = ()) -> None:
        self.patterns: list[re.Pattern[str]] = list(DEFAULT_PATTERNS)
        for pattern in extra:
            self.add(pattern)

    def add(self, pattern: str | re.Pattern[str]) -> None:
        self.patterns.append(re.compile(pattern) if isinstance(pattern, str) else pattern)

    def redact(self, text: str) -> tuple[str, int]:
        count = 0

        def replace(match: re.Match[str]) -> str:
            nonlocal count
            group = "secret" if match.re.groupindex.get("secret") and match.group("secret") else 0
            if match.group(group) == REDACTED:  # already redacted by an earlier pattern
                return match.group(0)
            count += 1
            offset = match.start()
            start, end = match.span(group)
            whole = match.group(0)
            return whole[: start - offset] + REDACTED + whole[end - offset :]

        for pattern in self.patterns:
            text = pattern.sub(replace, text)
        return text, count


def safe_name(name: Any) -> str:
    """A model-given name (of a tool, an approval) as plain text for the log: a str is copied
    exactly (``str.__str__`` runs none of a subclass's own methods), anything else is shown
    by its type's name; at most 64 characters either way."""
    text = str.__str__(name) if isinstance(name, str) else str.__str__(type(name).__name__)
    return text[:64]


def render_value(value: Any) -> str:
    """The text the model sees: a str as it is, anything else as JSON, falling back to str()."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return str(value)


def shape_output(value: Any, max_chars: int, redactor: Redactor | None) -> dict[str, Any]:
    """The ok result's fields: ``data`` plus ``truncated``/``original_chars``/``redactions``."""
    text = render_value(value)
    original = len(text)
    window_size = max_chars + LOOKAHEAD_CHARS if redactor is not None else max_chars
    window = text[:window_size]
    cut_off = original > len(window)
    redactions = 0
    if redactor is not None:
        window, redactions = redactor.redact(window)
    result: dict[str, Any] = {"ok": True}
    if cut_off or len(window) > max_chars:
        result["data"] = _cut(window, max_chars)
        result["truncated"] = True
        result["original_chars"] = original
    else:
        result["data"] = window
    if redactions:
        result["redactions"] = redactions
    return result


def _cut(text: str, limit: int) -> str:
    """Cut at ``limit``, stepping back rather than leaving half a ``[REDACTED]`` marker."""
    head = text[:limit]
    start = text.rfind("[", max(0, limit - len(REDACTED) + 1), limit)
    if start != -1 and text.startswith(REDACTED, start) and start + len(REDACTED) > limit:
        head = text[:start]
    return head
