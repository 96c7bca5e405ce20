"""Redact/truncate: redaction before truncation, bounded work, honest sizes."""

from __future__ import annotations

import time

import pytest

from agentkit import ToolRegistry, ToolSpec, invoke_tool
from agentkit.boundary.redaction import LOOKAHEAD_CHARS, REDACTED, Redactor, shape_output

OPENAI = "sk-proj-" + "A1b2C3d4" * 4
AWS = "AKIA" + "ABCDEFGHIJKLMNOP"
PEM = "-----BEGIN RSA PRIVATE KEY-----\n" + "MIIEowIBAAKCAQEA\n" * 40 + "-----END RSA PRIVATE KEY-----"


def tool(handler, out=200, **kw) -> ToolRegistry:
    return ToolRegistry([ToolSpec("t", "Test tool.", "read", 2.0, 1, out, handler,
                                  parameters={"type": "object"}, **kw)])


@pytest.mark.parametrize(
    "text, shown",
    [
        (f"key {OPENAI} end", f"key {REDACTED} end"),
        (f"id {AWS} end", f"id {REDACTED} end"),
        ("Authorization: Bearer abc.DEF-123_xyz", f"Authorization: Bearer {REDACTED}"),
        (f"before\n{PEM}\nafter", f"before\n{REDACTED}\nafter"),
        ("db password=hunter2 ok", f"db password={REDACTED} ok"),
        ('{"secret": "s3cr3t", "token": "t0k"}', f'{{"secret": "{REDACTED}", "token": "{REDACTED}"}}'),
    ],
)
def test_default_patterns(text, shown):
    result = invoke_tool(tool(lambda: text), "t", {})
    assert result["data"] == shown
    assert result["redactions"] == shown.count(REDACTED)


def test_overlapping_patterns_count_once():
    text, count = Redactor().redact(f"password={OPENAI}")
    assert text == f"password={REDACTED}" and count == 1


def test_registry_adds_patterns_and_a_spec_can_opt_out():
    reg = ToolRegistry(redact_patterns=[r"EMP-\d{6}"])
    reg.register(ToolSpec("a", "A.", "read", 1, 1, 100, lambda: "staff EMP-123456", parameters={"type": "object"}))
    reg.register(ToolSpec("b", "B.", "read", 1, 1, 100, lambda: f"raw {OPENAI}",
                          parameters={"type": "object"}, redact=False))
    assert invoke_tool(reg, "a", {}) == {"ok": True, "data": f"staff {REDACTED}", "redactions": 1}
    assert invoke_tool(reg, "b", {}) == {"ok": True, "data": f"raw {OPENAI}"}


def test_truncation_records_the_original_size():
    result = invoke_tool(tool(lambda: "x" * 500, out=100), "t", {})
    assert result == {"ok": True, "data": "x" * 100, "truncated": True, "original_chars": 500}


@pytest.mark.parametrize("offset", range(-40, 5))
def test_a_secret_straddling_the_cut_is_never_half_shown(offset):
    limit = 100
    start = limit + offset  # the secret starts before, at or just after the cut
    text = "a" * (start - 1) + " " + OPENAI + " tail" + "b" * 300
    result = invoke_tool(tool(lambda: text, out=limit), "t", {})
    data = result["data"]
    assert len(data) <= limit
    assert result["truncated"] and result["original_chars"] == len(text)
    for k in range(4, len(OPENAI) + 1):  # no prefix of the secret beyond "sk-p" is visible
        assert OPENAI[:k] not in data
    assert "[REDAC" not in data or REDACTED in data  # never half a marker


def test_a_pem_block_straddling_the_cut_is_redacted_from_its_start():
    text = "z" * 90 + PEM + "y" * 100
    result = invoke_tool(tool(lambda: text, out=120), "t", {})
    assert "MIIE" not in result["data"] and result["data"].startswith("z" * 90)


def test_a_pem_block_longer_than_the_window_is_still_hidden():
    huge_pem = "-----BEGIN PRIVATE KEY-----\n" + "Q" * (LOOKAHEAD_CHARS * 2) + "\n-----END PRIVATE KEY-----"
    result = invoke_tool(tool(lambda: "head " + huge_pem, out=50), "t", {})
    assert "QQQ" not in result["data"] and result["redactions"] == 1


def test_ten_megabytes_are_not_scanned_whole():
    big = "word " * 2_000_000  # 10 MB
    start = time.perf_counter()
    fields = shape_output(big, 2_000, Redactor())
    # Bounded work: a full regex scan of 10 MB with five patterns takes far longer than this
    # generous bound; the window is only 2,000 + look-ahead characters.
    assert time.perf_counter() - start < 1.0
    assert len(fields["data"]) == 2_000
    assert fields["original_chars"] == 10_000_000


def test_ten_megabytes_through_the_boundary():
    big = "x" * 10_000_000
    result = invoke_tool(tool(lambda: big, out=2_000), "t", {})
    assert len(result["data"]) == 2_000 and result["original_chars"] == 10_000_000


def test_data_length_never_exceeds_the_limit_after_redaction_grows_text():
    text = "password=a " * 50  # each 1-char secret grows to [REDACTED]
    result = invoke_tool(tool(lambda: text, out=64), "t", {})
    assert len(result["data"]) <= 64 and result["truncated"]
