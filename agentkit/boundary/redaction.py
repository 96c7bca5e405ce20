"""Redact/truncate: the stage between the raw result and what the model sees.

Order matters. Redaction runs first, so a secret is never cut in half with its first half
shown; truncation then keeps ``len(data) <= max_output_chars``.

How a secret is kept whole however the text is cut:

- every character of ``data`` was inside the scanned text, and the scan always reaches at
  least :data:`LOOKAHEAD_CHARS` past the last character shown (or the end of the text), so a
  secret that starts in the shown part is seen with enough of it to be recognised; patterns
  that can run long (a PEM block, a quoted value) match up to the end of the scanned text
  when their end is not in it;
- a secret that touches the cut is replaced whole, or its marker is left out entirely;
- when large redactions shrink the text (three PEM blocks become three markers), the scan
  grows until the shown text is complete. The work is bounded by the limit, not by the size
  of the result: at most :data:`SCAN_FACTOR` × (limit + look-ahead) characters are scanned;
  if that is not enough to fill the limit, less is shown (``truncated`` says so).

What is recognised (:data:`DEFAULT_PATTERNS` plus name/value pairs, see :class:`Redactor`):
OpenAI/Anthropic ``sk-`` keys, AWS access key ids, GitHub, Slack, Stripe, Google and npm
tokens, JWTs, ``Bearer``/``Basic`` credentials, ``user:pass@`` in URLs, PEM and PGP private
key blocks, and the value of any name containing password, passwd, pwd, secret, passphrase,
api_key/apikey, private_key, or ending in token (``DB_PASSWORD=``, ``"client_secret": …``,
``GITHUB_TOKEN=``; not counts such as ``max_tokens``), in ``=``, ``:`` and JSON forms,
including JSON-escaped pairs inside rendered JSON (``\\"password\\": \\"…\\"``). Quoted values
are replaced whole (spaces and escaped quotes included); a JSON value that is not a string
(a number, a list, an object) becomes the string ``"[REDACTED]"``, so JSON stays JSON.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

REDACTED = "[REDACTED]"

#: How far past the last shown character the scan always looks, so a secret that starts in
#: the shown part is recognised. (A PEM block of a 4096-bit RSA key is about 3,300
#: characters; patterns that can run longer match to the end of the scanned text.)
LOOKAHEAD_CHARS = 8_192

#: The scan of one output never exceeds ``SCAN_FACTOR * (max_output_chars + LOOKAHEAD_CHARS)``.
SCAN_FACTOR = 8

_SURROGATES = re.compile("[\ud800-\udfff]")

# Patterns with a group named ``secret`` replace only that group ("Bearer [REDACTED]").
DEFAULT_PATTERNS: tuple[re.Pattern[str], ...] = (
    # PEM and PGP private key blocks; an unterminated block is redacted to the end.
    re.compile(
        r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
        r"(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)"
    ),
    re.compile(r"(?<![A-Za-z0-9_-])sk-[A-Za-z0-9_-]{16,}"),  # OpenAI/Anthropic (sk-proj-, sk-ant-)
    re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}"),  # AWS access key ids
    re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{16,}"),  # GitHub tokens
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{16,}"),  # GitHub fine-grained tokens
    re.compile(r"\bxox[abeoprs]-[A-Za-z0-9-]{8,}"),  # Slack tokens
    re.compile(r"\bxapp-[A-Za-z0-9-]{8,}"),  # Slack app tokens
    re.compile(r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{8,}"),  # Stripe secret/restricted keys
    re.compile(r"\bAIza[0-9A-Za-z_-]{20,}"),  # Google API keys
    re.compile(r"\bnpm_[A-Za-z0-9]{20,}"),  # npm tokens
    # JWTs (header.payload[.signature]); a cut-off one is still two base64url parts.
    re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}(?:\.[A-Za-z0-9_-]*)?"),
    # A Bearer credential is told from prose ("Bearer tokens") by a digit or punctuation, or
    # by a length no English word has; after "Authorization:" any value is a credential.
    re.compile(
        r"(?i)\bbearer\s+(?P<secret>(?=[A-Za-z0-9._~+/-]*[0-9._~+/-])[A-Za-z0-9._~+/-]{6,}=*"
        r"|[A-Za-z]{24,}=*)"
    ),
    # A standalone Basic credential is told from prose by a digit, "+", "/" or "=" padding;
    # after "Authorization:" any value is a credential (see the name/value pairs).
    re.compile(r"\bBasic\s+(?P<secret>(?=[A-Za-z0-9+/]*[0-9+/=])[A-Za-z0-9+/]{6,}={0,2})"),
    # Credentials in URLs: scheme://user:password@host (user and password both hidden).
    re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://(?P<secret>[^\s:/?#@\"'\\]+:[^\s/?#@\"'\\]+)@"),
    # XML elements and command-line flags named like a secret: <password>…</, --token …
    re.compile(r"(?i)<(?:[A-Za-z0-9_.:-]*(?:passw(?:or)?d|secret|passphrase|api[_-]?key|token))>"
               r"(?P<secret>[^<]+)"),
    re.compile(r"(?i)(?<![A-Za-z0-9_-])--[A-Za-z0-9_-]*(?:passw(?:or)?d|secret|passphrase"
               r"|api[_-]?key|token)[ \t]+(?P<secret>[^\s\"'-][^\s\"']*)"),
)

#: Text (lower case) at least one of which a pattern's match must contain: a pattern whose
#: hints are all absent from the window is not run. Most output holds no secret at all, and
#: a substring test is far cheaper than a regular-expression scan.
_HINTS: dict[re.Pattern[str], tuple[str, ...]] = dict(zip(DEFAULT_PATTERNS, (
    ("-----begin ",),
    ("sk-",),
    ("akia", "asia", "abia", "acca"),
    ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    ("github_pat_",),
    ("xox",),
    ("xapp-",),
    ("k_live_", "k_test_"),
    ("aiza",),
    ("npm_",),
    ("eyj",),
    ("bearer",),
    ("basic",),
    ("://",),
    ("<",),
    ("--",),
), strict=True))
_HINT_SEARCH = re.compile("|".join(
    re.escape(hint) for hint in sorted({h for hints in _HINTS.values() for h in hints},
                                       key=len, reverse=True)
))

_NAME_CHARS = "A-Za-z0-9_.-"
#: A secret's name: it contains one of these words, or ends in "token".
_NAME = re.compile(
    rf"(?i)(?<![{_NAME_CHARS}])"
    rf"(?P<name>[{_NAME_CHARS}]*(?:passw(?:or)?d|pwd|secret|passphrase|api[_-]?key|apikey"
    rf"|private[_-]?key|authorization)[{_NAME_CHARS}]*|[{_NAME_CHARS}]*token)"
    rf"(?![{_NAME_CHARS}])"
    r"(?P<close>\\*\"|')?[ \t]*(?P<sep>=>|[:=])[ \t]*"
)
#: The words of a secret's name, as :data:`_NAME` spells them, for a quick search first.
_NAME_WORDS = ("passw", "pwd", "secret", "passphrase", "apikey", "api_key", "api-key",
               "private_key", "private-key", "privatekey", "authorization", "token")
_NAME_CHAR_SET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_NAME_BODY = re.compile(
    rf"(?i)[{_NAME_CHARS}]*(?:passw(?:or)?d|pwd|secret|passphrase|api[_-]?key|apikey"
    rf"|private[_-]?key|authorization)[{_NAME_CHARS}]*|[{_NAME_CHARS}]*token"
)
_AFTER_NAME = re.compile(r"(?P<close>\\*\"|')?[ \t]*(?P<sep>=>|[:=])[ \t]*")
_SCHEME = re.compile(r"(?i)(?:bearer|basic|token|digest|negotiate|apikey)[ \t]+")
_JSON_LITERALS = ("null", "true", "false")


@dataclass(frozen=True)
class _Span:
    start: int
    end: int
    replacement: str


class Redactor:
    """Replaces secrets with ``[REDACTED]`` and counts the spans replaced.

    ``extra`` patterns are added to :data:`DEFAULT_PATTERNS`; a pattern with a group named
    ``secret`` replaces only that group. Name/value pairs (``password=…``) are found by
    :meth:`spans` itself, not by a pattern, because the extent of the value depends on its
    form (quoted, JSON-escaped, a JSON list or object, a bare word).
    """

    def __init__(self, extra: Iterable[str | re.Pattern[str]] = ()) -> None:
        self.patterns: list[re.Pattern[str]] = list(DEFAULT_PATTERNS)
        for pattern in extra:
            self.add(pattern)

    def add(self, pattern: str | re.Pattern[str]) -> None:
        self.patterns.append(re.compile(pattern) if isinstance(pattern, str) else pattern)

    def redact(self, text: str) -> tuple[str, int]:
        """The whole text with every secret replaced, and how many spans were replaced."""
        spans = self.spans(text)
        pieces: list[str] = []
        position = 0
        for span in spans:
            pieces.append(text[position:span.start])
            pieces.append(span.replacement)
            position = span.end
        pieces.append(text[position:])
        return "".join(pieces), len(spans)

    def spans(self, text: str) -> list[_Span]:
        """The secrets in ``text``, sorted, overlapping ones merged into one span."""
        found: list[_Span] = []
        lowered = text.lower()
        if len(lowered) != len(text):  # a character whose lower case is longer: no shortcuts
            lowered = ""
        present = set(_HINT_SEARCH.findall(lowered)) if lowered else set()
        for pattern in self.patterns:
            hints = _HINTS.get(pattern)
            if hints and lowered and present.isdisjoint(hints):
                continue
            has_secret = "secret" in pattern.groupindex
            for match in pattern.finditer(text):
                if has_secret and match.group("secret") is not None:
                    start, end = match.span("secret")
                else:
                    start, end = match.span()
                if end > start and text[start:end] != REDACTED:
                    found.append(_Span(start, end, REDACTED))
        found.extend(_name_value_spans(text, lowered))
        return _merge(found)


def _merge(spans: list[_Span]) -> list[_Span]:
    spans.sort(key=lambda s: (s.start, -s.end))
    merged: list[_Span] = []
    for span in spans:
        if merged and span.start < merged[-1].end:
            last = merged[-1]
            if span.end > last.end:  # partly overlapping: one plain marker over both
                merged[-1] = _Span(last.start, span.end, REDACTED)
            continue
        merged.append(span)
    return merged


# ---------------------------------------------------------------- name/value pairs


def _name_value_spans(text: str, lowered: str = "") -> Iterable[_Span]:
    for start, end in _secret_names(text, lowered):
        after = _AFTER_NAME.match(text, end)
        if after is None:
            continue
        close = after.group("close")
        json_form = (
            close is not None and close.endswith('"')
            and text[max(0, start - len(close)):start] == close
        )
        colon = after.group("sep") == ":" and close is None
        span = _value_span(text, after.end(), json_form=json_form, colon=colon)
        if span is not None:
            yield span


def _secret_names(text: str, lowered: str) -> list[tuple[int, int]]:
    """``(start, end)`` of every name that names a secret: a whole run of name characters
    that contains a secret word or ends in "token". The words are found first with a plain
    substring search (``lowered`` is ``text.lower()`` of the same length; empty: use the
    regular expression), so text without them costs almost nothing."""
    if not lowered:
        return [(m.start("name"), m.end("name")) for m in _NAME.finditer(text)]
    names: set[tuple[int, int]] = set()
    limit = len(text)
    for word in _NAME_WORDS:
        index = lowered.find(word)
        while index != -1:
            start, end = index, index + len(word)
            while start > 0 and text[start - 1] in _NAME_CHAR_SET:
                start -= 1
            while end < limit and text[end] in _NAME_CHAR_SET:
                end += 1
            if _NAME_BODY.fullmatch(text, start, end):
                names.add((start, end))
            index = lowered.find(word, end)
    return sorted(names)


#: Backslashes before a quote at each depth of JSON-in-JSON escaping (\", \\\", …).
_QUOTE_LEVELS = (0, 1, 3, 7, 15, 31)


def _quote_level(text: str, index: int) -> int | None:
    """If a double quote opens at ``index`` (after 0, 1, 3, 7 … backslashes), that count."""
    run = 0
    limit = len(text)
    while index + run < limit and text[index + run] == "\\":
        run += 1
    if index + run < limit and text[index + run] == '"' and run in _QUOTE_LEVELS:
        return run
    return None


def _value_span(text: str, start: int, *, json_form: bool, colon: bool) -> _Span | None:
    """The span of the value that starts at ``start``, in whichever form it is written."""
    if start >= len(text):
        return None
    level = _quote_level(text, start)
    if level is not None:  # a string, possibly inside one or more JSON strings
        content = start + level + 1
        return _content(text, content, _string_end(text, content, level))
    if text[start] == "'":
        content = start + 1
        return _content(text, content, _single_quoted_end(text, content))
    marker = '"'
    if text[start] in "[{":
        level = _level_before(text, start)
        marker = "\\" * level + '"'
        end = _compound_end(text, start, level)
        if text[start:end] == REDACTED:
            return None
        return _Span(start, end, f"{marker}{REDACTED}{marker}" if json_form else REDACTED)
    scheme = _SCHEME.match(text, start)
    if scheme is not None:  # "Authorization: Basic …": the credential, not the scheme word
        start = scheme.end()
        colon = False
    stops = "\r\n\"\\" if colon else " \t\r\n\"'&,;}])\\"
    end = start
    limit = len(text)
    while end < limit and text[end] not in stops:
        end += 1
    if colon:  # "password: correct horse battery staple": to the end of the line
        while end > start and text[end - 1] in " \t":
            end -= 1
    value = text[start:end]
    if not value or value == REDACTED or (json_form and value in _JSON_LITERALS):
        return None
    if json_form:
        marker = "\\" * _level_before(text, start) + '"'
        return _Span(start, end, f"{marker}{REDACTED}{marker}")
    return _Span(start, end, REDACTED)


def _level_before(text: str, index: int) -> int:
    """The escaping depth of a bare JSON value at ``index``: the backslashes before the
    quote that closed its name (``\\"token\\": [`` is depth 1)."""
    position = index
    while position > 0 and text[position - 1] in " \t:=>":
        position -= 1
    if position == 0 or text[position - 1] != '"':
        return 0
    run = 0
    while position - 2 - run >= 0 and text[position - 2 - run] == "\\":
        run += 1
    return run if run in _QUOTE_LEVELS else 0


def _content(text: str, start: int, end: int) -> _Span | None:
    if end <= start or text[start:end] == REDACTED:
        return None
    return _Span(start, end, REDACTED)


def _string_end(text: str, index: int, level: int) -> int:
    """Where a double-quoted string at escaping ``level`` (its quotes have ``level``
    backslashes before them) that opened before ``index`` closes; the end of the text if it
    does not.

    At depth d (``level`` = 2**d - 1) a run of r backslashes before a quote is
    ``r // 2**d`` escaped backslashes of the string itself, then a quote whose own marker
    is ``r % 2**d`` backslashes. A marker equal to ``level`` is this string's quote: it closes
    the string after an even number of its own backslashes, and is an escaped quote inside it
    after an odd number. A smaller marker is a quote of an enclosing string, which ends this
    one too.
    """
    width = level + 1
    limit = len(text)
    while index < limit:
        char = text[index]
        if char == "\\":
            run = 1
            while index + run < limit and text[index + run] == "\\":
                run += 1
            if index + run < limit and text[index + run] == '"':
                own, marker = divmod(run, width)
                if marker < level or own % 2 == 0:
                    return index + run - marker
                index += run + 1
                continue
            index += run + 1  # an escape such as \n or \u: the next character is plain
            continue
        if char == '"':
            return index  # a quote with no backslash: this string (or an enclosing one) ends
        index += 1
    return limit


def _single_quoted_end(text: str, index: int) -> int:
    limit = len(text)
    while index < limit:
        char = text[index]
        if char == "\\":
            index += 2
            continue
        if char == "'":
            return index
        index += 1
    return limit


def _compound_end(text: str, index: int, level: int) -> int:
    """The end (exclusive) of the JSON list or object opening at ``index`` (strings at
    escaping ``level`` skipped); the end of the text if it does not close."""
    depth = 0
    limit = len(text)
    while index < limit:
        char = text[index]
        if char in "\\\"":
            run = 0
            while index + run < limit and text[index + run] == "\\":
                run += 1
            if index + run >= limit:
                return limit
            if text[index + run] != '"':
                index += run + 1  # an escape: the next character is plain
                continue
            if run == level:  # a string of this value: skip it whole
                index = _string_end(text, index + run + 1, level) + level + 1
                continue
            if run < level:
                return index  # the enclosing string ends: so does this value
            index += run + 1
            continue
        if char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
            if depth == 0:
                return index + 1
        index += 1
    return limit


# ---------------------------------------------------------------- rendering


def safe_name(name: Any) -> str:
    """A model-given name (of a tool, an approval) as plain text for the log: a str is copied
    exactly (``str.__str__`` runs none of a subclass's own methods), anything else is shown
    by its type's name; at most 64 characters either way."""
    return str.__str__(name)[:64] if isinstance(name, str) else type_name(name)


def render_value(value: Any) -> str:
    """The text the model sees: a str as it is, anything else as JSON, falling back to str().

    A str subclass is copied exactly (its own ``__str__``/``__len__`` are not trusted). A
    value that cannot be rendered at all (its ``__str__`` raises, an int too large for
    ``str``) becomes ``<unrenderable TYPE>``: the handler did return, so the call is still ok.
    """
    if isinstance(value, str):
        return str.__str__(value)
    for render in (_as_json, str):
        try:
            text = render(value)
        except Exception:  # noqa: S112 - try the next way; the last resort is below
            continue
        if isinstance(text, str):
            return str.__str__(text)
    return f"<unrenderable {type_name(value)}>"


def _as_json(value: Any) -> str:
    return _encode(value)


#: One encoder for every result (``json.dumps`` with options builds a new one each time).
_encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode


def type_name(value: Any) -> str:
    """The name of ``value``'s type for a log line or a message, at most 64 characters, read
    without running any of the value's own code ("object" if even that fails)."""
    try:
        name = type(value).__name__
        return str.__str__(name)[:64] if isinstance(name, str) else "object"
    except Exception:
        return "object"


def shape_output(value: Any, max_chars: int, redactor: Redactor | None) -> dict[str, Any]:
    """The ok result's fields: ``data`` plus ``truncated``/``original_chars``/``redactions``.

    ``data`` is valid UTF-8 text (a lone surrogate becomes U+FFFD) of at most ``max_chars``
    characters; ``original_chars`` is the true length of the rendered text.
    """
    text = render_value(value)
    original = len(text)
    if redactor is None:
        data, redactions, complete = text[:max_chars], 0, original <= max_chars
    else:
        data, redactions, complete = _redact_and_cut(text, max_chars, redactor)
    result: dict[str, Any] = {"ok": True, "data": _SURROGATES.sub("\ufffd", data)}
    if not complete:
        result["truncated"] = True
        result["original_chars"] = original
    if redactions:
        result["redactions"] = redactions
    return result


def _redact_and_cut(text: str, max_chars: int, redactor: Redactor) -> tuple[str, int, bool]:
    """``(data, redactions shown, whole text shown)``: redacted text cut at ``max_chars``.

    Scans a window that reaches :data:`LOOKAHEAD_CHARS` past the last shown character and
    grows it (doubling, up to the scan budget) while large redactions leave the shown text
    short of the limit.
    """
    budget = SCAN_FACTOR * (max_chars + LOOKAHEAD_CHARS)
    end = min(len(text), max_chars + LOOKAHEAD_CHARS)
    while True:
        whole = end >= len(text)
        window = text[:end]
        safe = end if whole else end - LOOKAHEAD_CHARS
        data, count, full, consumed = _assemble(window, redactor.spans(window), safe, max_chars)
        if whole or full or end >= budget:
            return data, count, whole and consumed
        end = min(len(text), budget, max(2 * end, end + LOOKAHEAD_CHARS))


def _assemble(window: str, spans: list[_Span], safe: int, limit: int) -> tuple[str, int, bool, bool]:
    """Build at most ``limit`` characters from ``window[:safe]`` with spans replaced.

    Returns ``(data, markers shown, limit reached, all of the window shown)``. A span that
    starts before ``safe`` is shown as its marker (it hides everything to its end, even past
    ``safe``); a marker that does not fit in the limit is left out whole.
    """
    pieces: list[str] = []
    size = count = position = 0
    for span in spans:
        if span.start >= safe:
            break
        plain = window[position:span.start]
        if size + len(plain) > limit:
            pieces.append(plain[: limit - size])
            return "".join(pieces), count, True, False
        pieces.append(plain)
        size += len(plain)
        if size + len(span.replacement) > limit:  # the marker does not fit: left out whole
            return "".join(pieces), count, True, False
        pieces.append(span.replacement)
        size += len(span.replacement)
        count += 1
        position = span.end
        if position >= safe:  # nothing after this span is known to be safe yet
            return "".join(pieces), count, size >= limit, position >= len(window)
    plain = window[position:safe]
    if size + len(plain) > limit:
        pieces.append(plain[: limit - size])
        return "".join(pieces), count, True, False
    pieces.append(plain)
    size += len(plain)
    return "".join(pieces), count, size >= limit, safe >= len(window)
