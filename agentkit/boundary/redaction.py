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

import itertools
import re
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from agentkit.boundary.canonical import encoder, quote_json

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
    # Tried once per run of base64url characters, at its first "eyJ" that follows a word
    # boundary (every later one in the run fails where the first does): linear, not
    # quadratic, on "eyJ-eyJ-eyJ-…".
    re.compile(
        r"(?<![A-Za-z0-9_-])(?:\b(?=eyJ)|(?=(?P<jwt_skip>[A-Za-z0-9_-]*?-(?=eyJ)))(?P=jwt_skip))"
        r"(?P<secret>eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}(?:\.[A-Za-z0-9_-]*)?)"
    ),
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
    # Tried once per run of scheme characters, at its first letter after a word boundary
    # (the scheme must reach the run's end, so later starts fail where the first does).
    re.compile(
        r"(?<![A-Za-z0-9+.-])(?:\b(?=[A-Za-z])"
        r"|(?=(?P<url_skip>[A-Za-z0-9+.-]*?[+.-](?=[A-Za-z])))(?P=url_skip))"
        r"[A-Za-z][A-Za-z0-9+.-]*://(?P<secret>[^\s:/?#@\"'\\]+:[^\s/?#@\"'\\]+)@"
    ),
    # XML elements and command-line flags named like a secret: <password>…</, --token …
    re.compile(r"(?i)<(?:[A-Za-z0-9_.:-]*(?:passw(?:or)?d|secret|passphrase|api[_-]?key|token))>"
               r"(?P<secret>[^<]+)"),
    re.compile(r"(?i)(?<![A-Za-z0-9_-])--[A-Za-z0-9_-]*(?:passw(?:or)?d|secret|passphrase"
               r"|api[_-]?key|token)[ \t]+(?P<secret>[^\s\"'-][^\s\"']*)"),
)

#: Text (lower case) at least one of which a pattern's match must contain, in the order of
#: :data:`DEFAULT_PATTERNS`: a pattern whose hints are all absent from the text is not run.
#: Most output holds no secret at all, and a substring test is far cheaper than a scan.
_PATTERN_HINTS: tuple[tuple[str, ...], ...] = (
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
)

#: The characters of a name: ASCII letters, digits, "_", "." and "-", and the four others
#: that case-insensitive matching reads as ASCII letters (İ, ı, ſ and the Kelvin sign).
_NAME_CHARS = "A-Za-z0-9_.\u0130\u0131\u017f\u212a-"
#: A secret's name: it contains one of these words, or ends in "token".
#: The words of a secret's name (lower case), found first with one search of the lowered text.
_NAME_WORDS = ("passw", "pwd", "secret", "passphrase", "apikey", "api_key", "api-key",
               "private_key", "private-key", "privatekey", "authorization", "token")
_WORD_SEARCH = re.compile("|".join(sorted(_NAME_WORDS, key=len, reverse=True)))
_NAME_CHAR_SET = frozenset(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-\u0130\u0131\u017f\u212a"
)
_NAME_RUN = re.compile(rf"[{_NAME_CHARS}]*")
#: A secret's name (a whole run of name characters that contains one of the words, or ends
#: in "token") and the separator after it; matched where such a run starts.
#: The name is matched inside a look-ahead, which the engine never backtracks into (an atomic
#: group, as Python 3.10 can write one): a long run without a separator fails at once.
_PAIR = re.compile(
    rf"(?=(?P<name>[{_NAME_CHARS}]*(?i:passw(?:or)?d|pwd|secret|passphrase|api[_-]?key|apikey"
    rf"|private[_-]?key|authorization)[{_NAME_CHARS}]*|[{_NAME_CHARS}]*(?i:token))"
    rf"(?![{_NAME_CHARS}]))(?P=name)"
    r"(?P<close>\\*\"|')?[ \t]*(?P<sep>=>|(?P<colon>:)|=)[ \t]*(?P<open>\\*\")?"
    # The commonest values, read here when short (at most 64 characters, so that names inside
    # one long value cost nothing extra): a line's rest after ":", a bare word after "=".
    # (A quoted string without escapes, closed by the quote that opened it, too.)
    r"(?(open)(?:(?=(?P<text>[^\"\\]{0,64})(?P=open)))?"
    r"|(?(colon)(?:(?=(?P<line>[^\r\n\"\\\[{'][^\r\n\"\\]{0,63}(?:(?=[\r\n\"\\])|\Z))))?"
    r"|(?:(?=(?P<bare>[^ \t\r\n\"'&,;}\])\\\[{][^ \t\r\n\"'&,;}\])\\]{0,63}"
    r"(?:(?=[ \t\r\n\"'&,;}\])\\])|\Z))))?))"
)
_SCHEME = re.compile(r"(?i)(?:bearer|basic|token|digest|negotiate|apikey)[ \t]+")
_SCHEME_HEADS = frozenset({"be", "ba", "to", "di", "ne", "ap"})  # how _SCHEME's words begin
_JSON_LITERALS = ("null", "true", "false")
_BACKSLASHES = re.compile(r"\\*")
#: In a string: backslashes then a quote (group 1: the quote), or backslashes before anything else.
_STRING_TOKEN = re.compile(r'\\*(")|\\+')
_SINGLE_STOP = re.compile(r"[\\']")
_COMPOUND_STOP = re.compile(r'[\\"\[\]{}]')
_BARE_STOP = re.compile(r"[ \t\r\n\"'&,;}\])\\]")
_COLON_STOP = re.compile(r'[\r\n"\\]')
#: What can open a value that runs past the end of a line's rest it starts in.
_EXTENDS = re.compile(r"['\[{]")

#: The name/value scan reads each character a bounded number of times (values already
#: measured are remembered). As a last guard against text built to defeat that, once it has
#: read :data:`_WORK_FACTOR` × the text (plus :data:`_WORK_SLACK`), everything from the next
#: secret's value to the end is redacted instead of scanned: more hidden, never less.
_WORK_FACTOR = 8
_WORK_SLACK = 4_096


class _Span(NamedTuple):
    """A secret found by :meth:`Redactor.spans`: replace ``text[start:end]`` with ``replacement``."""

    start: int
    end: int
    replacement: str


#: A span as the scan itself keeps it: a plain tuple ``(start, end, replacement)``. Hostile
#: text can hold a secret's value every six characters (160,000 spans in 1 MB); the garbage
#: collector stops tracking a plain tuple of ints and a str at its first collection, but
#: tracks every NamedTuple for good, and so many tracked survivors of one call set off a full
#: collection, which reads the whole heap: a cost that grows with the heap, not with the text.
_Cut = tuple[int, int, str]


# ---------------------------------------------------------------- name/value pairs


def _name_value_spans(text: str, lowered: str) -> list[_Cut]:
    """The values of every name that names a secret, sorted and merged as :func:`_merge`
    makes them: a whole run of name characters that contains a secret word or ends in
    "token", then ``=``, ``:`` or ``=>``.

    The words are found with one search of ``lowered`` (``text`` lowered, same length), so
    text without them costs almost nothing; each run is read once, and the scan stops once a
    value reaches the end of the text (everything after it is hidden already).
    """
    spans: list[_Cut] = []
    first = _WORD_SEARCH.search(lowered)
    if first is None:
        return spans
    scan = _ValueScan(text)
    limit = len(text)
    run_end = 0
    in_order = True
    pair_at = _PAIR.match
    for word in _WORD_SEARCH.finditer(lowered, first.start()):
        index = word.start()
        if index < run_end:
            continue  # in the run just read
        start = index
        while start > run_end and text[start - 1] in _NAME_CHAR_SET:
            start -= 1
        pair = pair_at(text, start)
        if pair is None:  # not a secret's name, or no separator after it
            run = _NAME_RUN.match(text, word.end())
            run_end = run.end() if run is not None else word.end()
            continue
        run_end = pair.end(1)  # the name's end
        close, sep, opening = pair.group(2, 3, 5)
        value_start = pair.end() if opening is None else pair.start(5)
        if scan.work > scan.budget:  # text built to make the scan slow: hide the rest
            if value_start < limit:
                spans.append((value_start, limit, REDACTED))
            return spans
        line_end = -1
        if opening is not None and len(opening) - 1 in _QUOTE_LEVELS:
            # A string, possibly inside one or more JSON strings (the commonest value).
            content = pair.end()
            quoted = pair.group(6)
            end = content + len(quoted) if quoted is not None else scan.string_end(
                content, len(opening) - 1)
            span = None if end <= content or text[content:end] == REDACTED else (
                content, end, REDACTED)
        elif close is None:
            colon = sep == ":"
            short = pair.group(7 if colon else 8)
            if short is None or opening is not None or short[:2].lower() in _SCHEME_HEADS:
                scan.line_end = -1
                span = scan.value(value_start, False, colon, _names_a_header(lowered, pair))
                line_end = scan.line_end
            else:  # a short bare word, or a short line's rest: no scan needed
                end = value_start + len(short.rstrip(" \t") if colon else short)
                span = (value_start, end, REDACTED) if end > value_start else None
                if colon:
                    line_end = value_start + len(short)
        else:
            json_form = close[-1] == '"' and text[max(0, start - len(close)):start] == close
            span = scan.value(value_start, json_form, False, _names_a_header(lowered, pair))
        if span is None:
            continue
        span_start, span_end = span[0], span[1]
        if spans and span_start < spans[-1][1]:  # inside the last value: merged as _merge does
            last_start, last_end = spans[-1][0], spans[-1][1]
            if span_start <= last_start:
                spans.append(span)  # (never seen: values come in order) _merge sorts it out
                in_order = False
            elif span_end > last_end:
                spans[-1] = (last_start, span_end, REDACTED)
        else:
            spans.append(span)
        if span_end >= limit:
            break
        if line_end >= span_end and scan.covers_the_rest_of_its_line(span_start, span_end,
                                                                     line_end):
            # No name inside this line's rest can reach past it: not one is read (on
            # "token: x token: x …" every name would be, each for nothing).
            run_end = max(run_end, span_end)
    return spans if in_order else _merge(spans)


#: Backslashes before a quote at each depth of JSON-in-JSON escaping (\", \\\", …).
_QUOTE_LEVELS = (0, 1, 3, 7, 15, 31)
#: A JSON value that is not a string replaced by the string "[REDACTED]", at each depth.
_MARKED = {level: "\\" * level + '"' + REDACTED + "\\" * level + '"' for level in _QUOTE_LEVELS}


def _quote_level(text: str, index: int) -> int | None:
    """If a double quote opens at ``index`` (after 0, 1, 3, 7 … backslashes), that count."""
    first = text[index]
    if first == '"':
        return 0
    if first != "\\":
        return None
    found = _BACKSLASHES.match(text, index)
    run = found.end() - index if found is not None else 0
    if index + run < len(text) and text[index + run] == '"' and run in _QUOTE_LEVELS:
        return run
    return None


def _names_a_header(lowered: str, pair: re.Match[str]) -> bool:
    """Whether the secret's name matched by ``pair`` is an ``Authorization`` header's
    (``Authorization``, ``Proxy-Authorization``): its value opens with a scheme word."""
    return "authorization" in lowered[pair.start("name"):pair.end("name")]


class _ValueScan:
    """Finds where each value ends, remembering what it measured so that values that share
    text (``token=[token=[…``, ``token: token: …`` on one line) are not read again: every
    scan jumps from one meaningful character to the next with a regular expression, and
    ``work`` counts the characters passed over."""

    __slots__ = ("bare", "budget", "colon", "compounds", "extender", "limit", "line_end", "tail",
                 "text", "work")

    def __init__(self, text: str) -> None:
        self.text = text
        self.limit = len(text)
        self.work = 0
        self.budget = _WORK_FACTOR * self.limit + _WORK_SLACK
        #: (start, level) of a list or object -> (its end, whether it closed there).
        self.compounds: dict[tuple[int, int], tuple[int, bool]] = {}
        self.bare = (-1, -1)  # (start, end) of the last bare value measured
        self.colon = (-1, -1, -1)  # (start, end, end without trailing blanks)
        #: where the line the last :meth:`value` read to ends (its stop character, or the
        #: text's end), when that value was a line's rest after ":"; else -1
        self.line_end = -1
        self.extender = (-1, -1)  # (searched from, the first _EXTENDS found there or limit)
        self.tail = (-1, False)  # (a line value's stop, whether plain_before says so)

    def value(self, start: int, json_form: bool, colon: bool, header: bool = False) -> _Cut | None:
        """The span of the value that starts at ``start``, in whichever form it is written.
        ``header``: the name is an ``Authorization`` header's, whose scheme word ("Basic",
        "Bearer") is shown and not read as part of the credential; after any other name
        the whole value is the secret, whatever its first word."""
        text = self.text
        if start >= self.limit:
            return None
        first = text[start]
        if first in "[{":
            depth = _level_before(text, start)
            if start + 1 < self.limit and text[start + 1] in "]}":
                end = start + 2  # [] or {}: nothing inside to read
            else:
                end = self.compound_end(start, depth)
                if text[start:end] == REDACTED:
                    return None
            return start, end, _MARKED[depth] if json_form else REDACTED
        level = (0 if first == '"' else _quote_level(text, start)) if first in "\\\"" else None
        if level is not None:  # a string, possibly inside one or more JSON strings
            content = start + level + 1
            end = self.string_end(content, level)
            if end <= content or text[content:end] == REDACTED:
                return None
            return content, end, REDACTED
        if first == "'":
            content = start + 1
            return _content(text, content, self.single_quoted_end(content))
        head = text[start:start + 2].lower()
        scheme = _SCHEME.match(text, start) if header and head in _SCHEME_HEADS else None
        if scheme is not None:  # "Authorization: Basic …": the credential, not the scheme word
            start = scheme.end()
        if colon:
            end = self.colon_end(start)
            self.line_end = self.colon[1]
        else:
            end = self.bare_end(start)
        value = text[start:end]
        if not value or value == REDACTED or (json_form and value in _JSON_LITERALS):
            return None
        if json_form:
            return start, end, _MARKED[_level_before(text, start)]
        return start, end, REDACTED

    def covers_the_rest_of_its_line(self, start: int, end: int, line_end: int) -> bool:
        """Whether no value that starts inside the line value ``text[start:end]`` (its
        line reaching ``line_end``: a stop character, or the text's end) can end past it.

        Inside it there is no quote, backslash or line break (it stopped at the first), so
        a later name's value there is a line's rest (ending where this one does), a bare
        word (ending at a blank, so by ``end``), or it opens with ``'``, ``[`` or ``{``
        (found here once, however many values ask) or with the quote at ``line_end``
        right after a separator (this value then ends in ``:``, ``=`` or ``=>``)."""
        text = self.text
        if line_end < self.limit and text[line_end] in "\\\"" and not self.plain_before(
                line_end, end):
            return False
        searched_from, found = self.extender
        if not searched_from <= start <= found:
            hit = _EXTENDS.search(text, start)
            found = hit.start() if hit is not None else self.limit
            self.extender = (start, found)
        return found >= line_end

    def plain_before(self, stop: int, end: int) -> bool:
        """Whether the quote (or backslash) at ``stop``, which ends a line value ending at
        ``end``, opens nothing for a name inside it: the value does not end in a separator
        (``:``, ``=``, ``=>``: a string would open at ``stop``), and no secret's name ends
        right at ``stop`` (``pwd": …``: its separator, and value, come after the quote)."""
        text = self.text
        if text[end - 1] in ":=>":
            return False
        if self.tail[0] == stop:
            return self.tail[1]
        start = stop
        while start > 0 and text[start - 1] in _NAME_CHAR_SET:
            start -= 1
        plain = start == stop or _PAIR.match(text, start) is None
        self.tail = (stop, plain)
        return plain

    def bare_end(self, start: int) -> int:
        """A bare value ends at a blank, a quote or JSON punctuation."""
        last_start, last_end = self.bare
        if last_start <= start <= last_end:  # no stop between: the same one ends this value
            return last_end
        found = _BARE_STOP.search(self.text, start)
        end = found.start() if found is not None else self.limit
        self.work += end - start
        self.bare = (start, end)
        return end

    def colon_end(self, start: int) -> int:
        """``password: correct horse battery staple``: to the end of the line (or a quote),
        trailing blanks left out."""
        last_start, last_end, last_trimmed = self.colon
        if last_start <= start <= last_end:
            return max(start, last_trimmed)
        found = _COLON_STOP.search(self.text, start)
        end = found.start() if found is not None else self.limit
        trimmed = end
        while trimmed > start and self.text[trimmed - 1] in " \t":
            trimmed -= 1
        self.work += end - start
        self.colon = (start, end, trimmed)
        return trimmed

    def string_end(self, index: int, level: int) -> int:
        """Where a double-quoted string at escaping ``level`` (its quotes have ``level``
        backslashes before them) that opened before ``index`` closes; the end of the text
        if it does not.

        At depth d (``level`` = 2**d - 1) a run of r backslashes before a quote is
        ``r // 2**d`` escaped backslashes of the string itself, then a quote whose own
        marker is ``r % 2**d`` backslashes. A marker equal to ``level`` is this string's
        quote: it closes the string after an even number of its own backslashes, and is an
        escaped quote inside it after an odd number. A smaller marker is a quote of an
        enclosing string, which ends this one too.
        """
        text, limit = self.text, self.limit
        width = level + 1
        begin = index
        end = limit
        search = _STRING_TOKEN.search
        while True:
            found = search(text, index)
            if found is None:
                break
            position, after = found.span()
            run = after - position - 1
            if found.group(1) is None:  # an escape such as \n: the next character is plain
                index = after + 1
                continue
            if run == 0:
                end = position  # a quote with no backslash: this string (or an enclosing one) ends
                break
            own, marker = divmod(run, width)
            if marker < level or own % 2 == 0:
                end = position + run - marker
                break
            index = after  # an escaped quote of this string
        self.work += end - begin
        return end

    def single_quoted_end(self, index: int) -> int:
        text = self.text
        begin = index
        end = self.limit
        while True:
            found = _SINGLE_STOP.search(text, index)
            if found is None:
                break
            position = found.start()
            if text[position] == "'":
                end = position
                break
            index = position + 2
        self.work += end - begin
        return end

    def compound_end(self, index: int, level: int) -> int:
        """The end (exclusive) of the JSON list or object opening at ``index`` (strings at
        escaping ``level`` skipped); the end of the text if it does not close.

        Every list or object met on the way is remembered with its end, so a value that
        starts inside one already measured is answered without reading it again.
        """
        cache = self.compounds
        known = cache.get((index, level))
        if known is not None:
            return known[0]
        text, limit = self.text, self.limit
        opened = [index]
        position = index + 1
        result = limit
        while True:
            found = _COMPOUND_STOP.search(text, position)
            if found is None:
                break
            at = found.start()
            char = text[at]
            if char in "\\\"":
                run_match = _BACKSLASHES.match(text, at)
                run = run_match.end() - at if run_match is not None else 0
                if at + run >= limit:
                    break
                if text[at + run] != '"':
                    position = at + run + 1  # an escape: the next character is plain
                    continue
                if run == level:  # a string of this value: skip it whole
                    position = self.string_end(at + run + 1, level) + level + 1
                    continue
                if run < level:
                    result = at  # the enclosing string ends: so does this value
                    break
                position = at + run + 1
                continue
            if char in "[{":
                known = cache.get((at, level))
                if known is None:
                    opened.append(at)
                    position = at + 1
                    continue
                end, closed = known
                if closed:
                    position = end
                    continue
                result = end
                break
            begin = opened.pop()
            cache[(begin, level)] = (at + 1, True)
            if not opened:
                self.work += at + 1 - index
                return at + 1
            position = at + 1
        if result < limit:  # (a value that runs to the end of the text ends the scan anyway)
            for begin in opened:
                cache[(begin, level)] = (result, False)
        self.work += result - index
        return result


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


def _content(text: str, start: int, end: int) -> _Cut | None:
    if end <= start or text[start:end] == REDACTED:
        return None
    return start, end, REDACTED


# ---------------------------------------------------------------- redactor


class _Rule(NamedTuple):
    """A pattern with what :meth:`Redactor.spans` needs to know about it, worked out once."""

    pattern: re.Pattern[str]
    hints: frozenset[str] | None  # None: always run (a registry's own pattern)
    has_secret: bool


_DEFAULT_RULES: tuple[_Rule, ...] = tuple(
    _Rule(pattern, frozenset(hints), "secret" in pattern.groupindex)
    for pattern, hints in zip(DEFAULT_PATTERNS, _PATTERN_HINTS, strict=True)
)
_ALL_HINTS: tuple[str, ...] = tuple(sorted({h for hints in _PATTERN_HINTS for h in hints},
                                           key=len, reverse=True))
_HINT_SEARCH = re.compile("|".join(re.escape(hint) for hint in _ALL_HINTS))
#: Every hint and every word of a secret's name, in one search of the lowered text (grouped by
#: first character, which the engine tests first): where it finds nothing, neither
#: :func:`_present_hints` nor :func:`_name_value_spans` can find anything in that same text,
#: so the default rules find no span.
_ANY_HINT = re.compile("|".join(
    re.escape(first) + "(?:" + "|".join(re.escape(word[1:]) for word in words) + ")"
    for first, words in itertools.groupby(
        sorted({*_ALL_HINTS, *_NAME_WORDS}, key=lambda word: (word[0], -len(word), word)),
        key=lambda word: word[0],
    )
))
#: Texts up to this long may skip the scan when :data:`_ANY_HINT` finds nothing in them.
_QUICK_CHARS = 4_096


#: Compared with a redactor's ``patterns``: equal (the same patterns, in order) means only the
#: default rules apply.
_DEFAULT_PATTERN_LIST: list[re.Pattern[str]] = list(DEFAULT_PATTERNS)


def _rule(pattern: re.Pattern[str]) -> _Rule:
    return _Rule(pattern, None, "secret" in pattern.groupindex)


class Redactor:
    """Replaces secrets with ``[REDACTED]`` and counts the spans replaced.

    ``extra`` patterns are added to :data:`DEFAULT_PATTERNS`; a pattern with a group named
    ``secret`` replaces only that group. Name/value pairs (``password=…``) are found by
    :meth:`spans` itself, not by a pattern, because the extent of the value depends on its
    form (quoted, JSON-escaped, a JSON list or object, a bare word).

    Every default pattern and the name/value scan take time linear in the text, whatever
    it holds (a registry's own patterns are its own to keep linear).
    """

    def __init__(self, extra: Iterable[str | re.Pattern[str]] = ()) -> None:
        self.patterns: list[re.Pattern[str]] = list(DEFAULT_PATTERNS)
        self._rules: list[_Rule] = list(_DEFAULT_RULES)
        for pattern in extra:
            self.add(pattern)

    def add(self, pattern: str | re.Pattern[str]) -> None:
        compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
        self.patterns.append(compiled)
        self._rules.append(_rule(compiled))

    def redact(self, text: str) -> tuple[str, int]:
        """The whole text with every secret replaced, and how many spans were replaced."""
        spans = self._cuts(text)
        return _splice(text, spans), len(spans)

    def spans(self, text: str) -> list[_Span]:
        """The secrets in ``text``, sorted, overlapping ones merged into one span."""
        return [_Span(*cut) for cut in self._cuts(text)]

    def _cuts(self, text: str) -> list[_Cut]:
        """:meth:`spans` as plain tuples (what the scan keeps; see :data:`_Cut`)."""
        if self.finds_nothing(text):
            return []
        found: list[_Cut] = []
        lowered = _ascii_lowered(text)
        present = _present_hints(lowered)
        for pattern, hints, has_secret in self._current_rules():
            if hints is not None and present.isdisjoint(hints):
                continue
            for match in pattern.finditer(text):
                if has_secret and match.group("secret") is not None:
                    start, end = match.span("secret")
                else:
                    start, end = match.span()
                if end > start and text[start:end] != REDACTED:
                    found.append((start, end, REDACTED))
        pairs = _name_value_spans(text, lowered)
        if not found:
            return pairs  # sorted and merged already
        found.extend(pairs)
        return _merge(found)

    def finds_nothing(self, text: str) -> bool:
        """True when ``text`` is short, holds no hint of any default pattern nor any word of a
        secret's name, and only the default patterns are in use: then :meth:`spans` is empty,
        decided by one search. False means only "scan to know"."""
        return (
            len(text) <= _QUICK_CHARS
            and self.patterns == _DEFAULT_PATTERN_LIST
            and _ANY_HINT.search(_ascii_lowered(text)) is None
        )

    def _current_rules(self) -> list[_Rule]:
        """The rules for :attr:`patterns` (rebuilt only if someone changed that list)."""
        rules = self._rules
        patterns = self.patterns
        if len(rules) != len(patterns) or any(
            rule.pattern is not pattern for rule, pattern in zip(rules, patterns, strict=True)
        ):
            defaults = {id(rule.pattern): rule for rule in _DEFAULT_RULES}
            rules = self._rules = [defaults.get(id(p)) or _rule(p) for p in patterns]
        return rules


def _ascii_lowered(text: str) -> str:
    """``text.lower()`` with the same length as ``text`` (so indexes agree): U+0130 (İ), the
    one character whose lower case is two, becomes ``i`` as the patterns' ``(?i)`` reads it."""
    lowered = text.lower()
    if len(lowered) == len(text):
        return lowered
    lowered = text.replace("\u0130", "i").lower()
    if len(lowered) == len(text):
        return lowered
    return "".join(char.lower()[:1] for char in text)  # pragma: no cover - no such character today


def _present_hints(lowered: str) -> frozenset[str]:
    """The hints present in ``lowered``: one search, which ends the matter when none is."""
    first = _HINT_SEARCH.search(lowered)
    if first is None:
        return frozenset()
    start = first.start()
    return frozenset(hint for hint in _ALL_HINTS if lowered.find(hint, start) != -1)


def _merge(spans: list[_Cut]) -> list[_Cut]:
    """``spans`` sorted, overlapping ones merged into one."""
    spans.sort(key=_span_order)
    merged: list[_Cut] = []
    for span in spans:
        if merged and span[0] < merged[-1][1]:
            last_start, last_end, _ = merged[-1]
            if span[1] > last_end:  # partly overlapping: one plain marker over both
                merged[-1] = (last_start, span[1], REDACTED)
            continue
        merged.append(span)
    return merged


def _span_order(span: _Cut) -> tuple[int, int]:
    return span[0], -span[1]


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
    kind = type(value)
    if kind is list or kind is tuple:
        # The common small result, a few strings: json.dumps's very text, without building
        # an encoder (a list of str cannot be cyclic; the C quoting reads a str's characters
        # and runs none of its code). Any other item: TypeError, and the full encoder decides.
        try:
            return "[" + ", ".join(map(_quote, value)) + "]"
        except TypeError:
            pass
    for render in _RENDERERS:
        try:
            text = render(value)
        except Exception:  # noqa: S112 - try the next way; the last resort is below
            continue
        if isinstance(text, str):
            return str.__str__(text)
    return f"<unrenderable {type_name(value)}>"


def _as_json(value: Any) -> str:
    return _encode(value)


#: How :func:`render_value` tries a value that is not a str: as JSON, else by ``str()``.
_RENDERERS: tuple[Callable[[Any], str], ...] = (_as_json, str)


#: One encoder for every result, the C encoder called directly (``json.dumps`` with options
#: and ``JSONEncoder.encode`` build a new one each time).
_encode = encoder()
_quote = quote_json


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
    if original <= max_chars and (redactor is None or redactor.finds_nothing(text)):
        # The common small result with nothing to hide: shown whole, nothing to cut or scan.
        return {"ok": True, "data": text if text.isascii() else _SURROGATES.sub("\ufffd", text)}
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
        data, count, full, consumed = _assemble(window, redactor._cuts(window), safe, max_chars)
        if whole or full or end >= budget:
            return data, count, whole and consumed
        end = min(len(text), budget, max(2 * end, end + LOOKAHEAD_CHARS))


def _splice(text: str, spans: list[_Cut]) -> str:
    """``text`` with each (sorted, disjoint) span replaced by its replacement."""
    pieces: list[str] = []
    position = 0
    for start, end, replacement in spans:
        pieces.append(text[position:start])
        pieces.append(replacement)
        position = end
    pieces.append(text[position:])
    return "".join(pieces)


def _assemble(window: str, spans: list[_Cut], safe: int, limit: int) -> tuple[str, int, bool, bool]:
    """Build at most ``limit`` characters from ``window[:safe]`` with spans replaced.

    Returns ``(data, markers shown, limit reached, all of the window shown)``. A span that
    starts before ``safe`` is shown as its marker (it hides everything to its end, even past
    ``safe``); a marker that does not fit in the limit is left out whole.
    """
    if safe >= len(window):  # the whole text: if it fits, no cut to look for
        size = len(window) + sum([len(r) - e + s for s, e, r in spans])
        if size <= limit:
            return _splice(window, spans), len(spans), size >= limit, True
    pieces: list[str] = []
    size = count = position = 0
    for start, end, replacement in spans:
        if start >= safe:
            break
        plain = window[position:start]
        if size + len(plain) > limit:
            pieces.append(plain[: limit - size])
            return "".join(pieces), count, True, False
        pieces.append(plain)
        size += len(plain)
        if size + len(replacement) > limit:  # the marker does not fit: left out whole
            return "".join(pieces), count, True, False
        pieces.append(replacement)
        size += len(replacement)
        count += 1
        position = end
        if position >= safe:  # nothing after this span is known to be safe yet
            return "".join(pieces), count, size >= limit, position >= len(window)
    plain = window[position:safe]
    if size + len(plain) > limit:
        pieces.append(plain[: limit - size])
        return "".join(pieces), count, True, False
    pieces.append(plain)
    size += len(plain)
    return "".join(pieces), count, size >= limit, safe >= len(window)
