"""Redaction stays linear whatever a tool returns (issue 17; docs/design.md#redaction).

Anyone who controls a fetched page controls a tool's output, so the scan must not be made
quadratic by the text: ``token=[`` repeated, ``token={``, ``token: x`` on one long line, a
U+0130 before the names, runs of ``eyJ-`` or ``a.a.a.…://``, a secret name every few
characters. The speed goals live in ``make bench`` (group "redaction"); here the growth is
checked as a ratio of CPU times measured in one fresh process, with wide margins (linear
work grows 8× for 8× the text, quadratic work 64×), and the redaction promise is checked on
the same hostile texts.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentkit.boundary import redaction
from agentkit.boundary.redaction import REDACTED, Redactor, shape_output

#: Units that, repeated, made some part of the old scan quadratic (or nearly so).
HOSTILE_UNITS = [
    "token=[", "token={", "token: x ", "\u0130password: ", "eyJ-", "a.", "pwd=1 ", "pwd={}",
    'pwd=\\"', "pwd:a\n", "token=", "apwd", "--pwd", "<pwd>", "x://a:b@", "'pwd':'a',",
    "sk-aaaaaaaaaaaaaaaaaa ", "Bearer a.b.c.d ", "-----BEGIN PRIVATE KEY-----", "a-eyJ",
    'token=["', "password=\\'", "\\\\\\\"token\\\\\\\":[", " token: x",
]

_MEASURE = textwrap.dedent(
    """
    import json, sys, time
    from agentkit.boundary.redaction import Redactor, shape_output

    def cpu(text, limit):
        redactor = Redactor()
        best = float("inf")
        for _ in range(3):
            started = time.process_time()
            shape_output(text, limit, redactor)
            best = min(best, time.process_time() - started)
        return max(best, 1e-6)

    def fill(unit, size):
        return (unit * (size // len(unit) + 1))[:size]

    units, small, large = json.loads(sys.argv[1]), 12_500, 100_000
    prose = "The quick brown fox jumps over the lazy dog, and then some more prose. "
    benign = cpu(fill(prose, large), 10**9)
    out = {}
    for unit in units:
        whole_small, whole_large = cpu(fill(unit, small), 10**9), cpu(fill(unit, large), 10**9)
        cut_100k, cut_1m = cpu(fill(unit, large), 2_000), cpu(fill(unit, 1_000_000), 2_000)
        out[unit] = [whole_large / whole_small, whole_large / benign, cut_1m / cut_100k]
    print(json.dumps(out))
    """
)


def test_hostile_output_costs_time_linear_in_its_length_and_bounded_by_the_limit():
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, json.dumps(HOSTILE_UNITS)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    ratios = json.loads(done.stdout)
    for unit, (growth, versus_benign, cut) in ratios.items():
        # 8× the text: linear work is ~8×, quadratic 64×.
        assert growth < 30, f"{unit!r}: 100 KB costs {growth:.1f}× 12.5 KB"
        # The goal (make bench) is 25×; the margin absorbs a loaded machine.
        assert versus_benign < 60, f"{unit!r}: {versus_benign:.1f}× benign prose"
        # Cut at 2,000 characters, the work is bounded by the limit: 1 MB costs what 100 KB does.
        assert cut < 3, f"{unit!r}: 1 MB costs {cut:.1f}× 100 KB under a 2,000-character limit"


def _fill(unit: str, size: int) -> str:
    return (unit * (size // len(unit) + 1))[:size]


@pytest.mark.parametrize("unit", HOSTILE_UNITS)
def test_the_scan_reads_hostile_text_a_bounded_number_of_times(unit, monkeypatch):
    # The name/value scan counts the characters it passes over: at most a constant times the
    # text, never a multiple that grows with it.
    scans: list[redaction._ValueScan] = []
    original = redaction._ValueScan.__init__

    def recording(self: redaction._ValueScan, text: str) -> None:
        original(self, text)
        scans.append(self)

    monkeypatch.setattr(redaction._ValueScan, "__init__", recording)
    for size in (10_000, 80_000):
        scans.clear()
        Redactor().spans(_fill(unit, size))
        work = sum(scan.work for scan in scans)
        assert work <= 3 * size + 100, (unit, size, work)


def test_past_its_work_budget_the_scan_hides_the_rest_instead_of_reading_it(monkeypatch):
    monkeypatch.setattr(redaction, "_WORK_FACTOR", 0)
    monkeypatch.setattr(redaction, "_WORK_SLACK", 5)
    long_value = "first secret " * 10  # long enough to be scanned, not read by the pattern
    text = f'password="{long_value}" and then token=second-secret, more words'
    redacted, count = Redactor().redact(text)
    # The first value is read (budget not yet spent); after it, everything is hidden.
    assert redacted == f'password="{REDACTED}" and then token={REDACTED}'
    assert "second" not in redacted and count == 2


def test_a_character_whose_lower_case_is_longer_changes_nothing():
    # U+0130 lowers to two characters; the scan still finds every secret, in linear time.
    text = "\u0130 password=hunter22 \u0130 api_key: sk_abcdef\n\u0130 {\"token\": \"t0ps3cret\"}"
    redacted, count = Redactor().redact(text)
    for secret in ("hunter22", "sk_abcdef", "t0ps3cret"):
        assert secret not in redacted
    assert count == 3 and redacted.count("\u0130") == 3
    # A name spelled with it (case-insensitive matching reads it as "i") is still a name.
    assert Redactor().redact("API_K\u0130Y=nope password\u0130=hunter22")[0].endswith(
        f"password\u0130={REDACTED}")


def test_a_pem_block_after_a_dash_is_still_found():
    # One hint search used to consume "--" of "------BEGIN" and miss the PEM hint.
    key = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"
    assert Redactor().redact("-" + key) == ("-" + REDACTED, 1)


def test_jwt_and_url_patterns_keep_their_matches():
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
    for text in (jwt, f"x-{jwt}", f"a-eyJ-b-{jwt}", f"eyJ-eyJ-{jwt}"):
        redacted, count = Redactor().redact(text)
        assert "dozjgNry" not in redacted and "eyJzdWIi" not in redacted and count == 1, text
    assert Redactor().redact("word_eyJhbGciOi.eyJzdWIiOiIx")[1] == 0  # no word boundary
    for url in ("https://ada:pw123456@host", "1.https://ada:pw123456@host",
                "a.b+c-d://ada:pw123456@host", "-https://ada:pw123456@host"):
        redacted, _ = Redactor().redact(url)
        assert "pw123456" not in redacted, url


class _Unhashable:
    """A pattern-like object whose hash raises: the redactor must never hash a pattern."""

    def __init__(self) -> None:
        import re

        self._inner = re.compile(r"custom-\d+")
        self.groupindex = self._inner.groupindex

    def finditer(self, text: str):  # type: ignore[no-untyped-def]
        return self._inner.finditer(text)

    def __hash__(self) -> int:
        raise AssertionError("a pattern was hashed")


def test_no_pattern_is_hashed_per_call():
    redactor = Redactor()
    redactor.patterns.append(_Unhashable())  # type: ignore[arg-type]
    for _ in range(3):
        assert redactor.redact("custom-123 and password=x")[1] == 2


@st.composite
def hostile_with_secret(draw):  # type: ignore[no-untyped-def]
    unit = draw(st.sampled_from(HOSTILE_UNITS))
    before = _fill(unit, draw(st.integers(0, 3_000)))
    secret = draw(st.text(alphabet="ABCDEFGHJKLMNPQRSTUVWXYZ23456789", min_size=12, max_size=24))
    pair = draw(st.sampled_from([
        f"password={secret}", f"\"api_key\": \"{secret}\"", f"token: {secret}",
        f"--token {secret}", f"Bearer {secret}9", f"https://u:{secret}@h",
    ]))
    after = _fill(draw(st.sampled_from(HOSTILE_UNITS)), draw(st.integers(0, 3_000)))
    return before + " " + pair + " " + after, secret


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(hostile_with_secret(), st.sampled_from([50, 700, 2_000, 10**6]))
def test_a_secret_in_hostile_text_never_shows(case, limit):
    text, secret = case
    data = shape_output(text, limit, Redactor())["data"]
    assert len(data) <= limit
    for start in range(len(secret) - 5):
        assert secret[start:start + 6] not in data


@pytest.mark.parametrize(("text", "expected"), [
    ("token: Bearer abc.def ghi", f"token: {REDACTED}"),  # a scheme only after Authorization
    ("Authorization: Bearer abc.def ghi", f"Authorization: Bearer {REDACTED}"),
    ("password=basic", f"password={REDACTED}"),
    ("api_key= [1, 2] x", f"api_key= {REDACTED} x"),
    ("pwd: 'a b' c", f"pwd: '{REDACTED}' c"),
    ("secret=" + "x" * 100 + " tail", f"secret={REDACTED} tail"),
    ("token: " + "y " * 60 + "\nnext", f"token: {REDACTED} \nnext"),
    ("pwd=a,b", f"pwd={REDACTED},b"),
    ("Authorization: Basic dXNlcjpwYXNz", f"Authorization: Basic {REDACTED}"),
    ("pwd:   ", "pwd:   "),
    ("token=[REDACTED] ok", "token=[REDACTED] ok"),
    ('{"token": "a \\" b", "n": 1}', f'{{"token": "{REDACTED}", "n": 1}}'),
    ('{"token": [1, {"a": "]"}], "n": 1}', f'{{"token": "{REDACTED}", "n": 1}}'),
    ("password=x-token=[a, b] tail", f"password={REDACTED} tail"),
])
def test_short_and_long_values_are_read_the_same_way(text: str, expected: str) -> None:
    # Short values are read by the name's own pattern, long ones by the scan: same result.
    assert Redactor().redact(text)[0] == expected


def test_a_million_characters_of_hostile_text_set_off_no_full_garbage_collection():
    # 1 MB of 'pwd=\"' holds ~166,000 values. Kept as objects the collector tracks, they set
    # off a full collection, which reads the whole heap: a cost that grows with the
    # application's heap, not with the text (the bench saw 1 MB cost 16× 100 KB).
    assert gc.isenabled()
    text = _fill('pwd=\\"', 1_000_000)
    full: list[dict[str, int]] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            full.append(info)

    gc.collect()
    gc.callbacks.append(seen)
    try:
        result = shape_output(text, 10**9, Redactor())
    finally:
        gc.callbacks.remove(seen)
    assert result["redactions"] == len(text) // 6 and "pwd=\\" not in result["data"][8:]
    assert full == []


class _CountingPattern:
    """``_PAIR`` with its matches counted: one per name the scan reads."""

    def __init__(self, pattern: Any) -> None:
        self.pattern = pattern
        self.calls = 0

    def match(self, text: str, pos: int = 0) -> Any:
        self.calls += 1
        return self.pattern.match(text, pos)


@pytest.mark.parametrize("render", [str, lambda text: json.dumps({"t": text})])
def test_names_inside_a_line_value_that_nothing_can_extend_are_not_read(render, monkeypatch):
    """``token: x token: x …`` on one line: the first value is the line's rest, and no name
    inside it can reach past it (no quote, bracket or brace opens there), so the later
    names are not read at all (they were, each for nothing: 25× benign prose at 100 KB)."""
    counting = _CountingPattern(redaction._PAIR)
    monkeypatch.setattr(redaction, "_PAIR", counting)
    for size in (1_000, 100_000):
        text = render(_fill(" token: x", size))  # (ends in a blank: 1,000 = 9 × 111 + 1)
        assert Redactor().redact(text) == (render(f" token: {REDACTED} "), 1)
    assert counting.calls <= 2 * 3  # a few per text, not one per name (11,000 of them)


_PIECES = ["token", "pwd", "password", "secret", ":", ": ", "=", "=>", " ", "\t", "\n", "\r",
           '"', "'", "\\", '\\"', "[", "]", "{", "}", ",", "&", "x", "abc", "Bearer ", "Basic ",
           "xtoken", "max_tokens", REDACTED, "\u0130"]


@settings(max_examples=1_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(_PIECES), max_size=40), st.booleans())
def test_skipping_the_names_inside_a_line_value_changes_nothing(
    pieces: list[str], as_json: bool
) -> None:
    """The same output as the full read (every name read), on random texts of the pieces a
    name, its separator and its value are made of, as they are and inside a JSON string."""
    text = "".join(pieces)
    if as_json:
        text = json.dumps({"t": text})
    quick = Redactor().redact(text)
    with pytest.MonkeyPatch.context() as full_read:
        full_read.setattr(redaction._ValueScan, "covers_the_rest_of_its_line",
                          lambda self, start, end, line_end: False)
        assert Redactor().redact(text) == quick
