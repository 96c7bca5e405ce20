"""A secret never reaches the model (issue 10, points 6-10; docs/design.md#redaction).

The contract is checked on the exact characters shown: for every kind of secret, every
placement (start, middle, just before, across and after the cut, after large redactions) and
many limits, ``data`` holds no fragment of the secret (no 6-character substring of it) and
``len(data) <= max_output_chars``.
"""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentkit import ToolRegistry, ToolSpec, invoke_tool
from agentkit.boundary.redaction import (
    LOOKAHEAD_CHARS,
    REDACTED,
    SCAN_FACTOR,
    Redactor,
    shape_output,
)

ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
UPPER_DIGITS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
B64URL = ALNUM + "_-"
FRAGMENT = 6


def alnum(low: int, high: int | None = None, alphabet: str = ALNUM) -> st.SearchStrategy[str]:
    return st.text(alphabet=alphabet, min_size=low, max_size=high if high is not None else low)


def pem(kind: str = "RSA PRIVATE KEY", body: str = "MIIEowIBAAKCAQEA") -> str:
    return f"-----BEGIN {kind}-----\n" + (body + "\n") * 200 + f"-----END {kind}-----"


# Each strategy gives (text as it appears in the output, [the secret parts that must never show]).
NAMES = ["DB_PASSWORD", "MYSQL_ROOT_PASSWORD", "GITHUB_TOKEN", "access_token", "client_secret",
         "db_password", "password", "passwd", "api_key", "apikey", "x-api-key", "passphrase",
         "refresh_token", "aws_secret_access_key", "SECRET", "user_pwd"]


@st.composite
def name_value(draw) -> tuple[str, list[str]]:
    name = draw(st.sampled_from(NAMES))
    words = draw(st.lists(alnum(3, 10), min_size=1, max_size=4))
    value = " ".join(words)
    form = draw(st.sampled_from(["eq", "colon", "json", "single", "double", "escaped", "jsonesc",
                                 "yaml", "spaced"]))
    if form in ("eq", "spaced"):
        value = value.replace(" ", "")
    if form == "eq":
        return f"{name}={value}", [value]
    if form == "spaced":
        return f"{name} = {value}", [value]
    if form == "colon":
        return f"{name}: {value}", [value]
    if form == "yaml":
        return f"  {name}: {value}\n", [value]
    if form == "json":
        return json.dumps({name: value}), [value]
    if form == "single":
        return f"{name}='{value}'", [value]
    if form == "double":
        inner = value.replace(" ", ' \\"', 1) if " " in value else value
        return f'{name}="{inner}"', [part for part in inner.split('\\"') if len(part) >= FRAGMENT]
    if form == "escaped":
        # A JSON pair inside a string, then rendered as JSON: \"name\": \"value\"
        return json.dumps({"logs": [f'"{name}": "{value}"']}), [value]
    nested = json.dumps({"config": json.dumps({name: value})})  # doubly escaped
    return nested, [value]


@st.composite
def non_string_values(draw) -> tuple[str, list[str]]:
    name = draw(st.sampled_from(["token", "password", "client_secret", "api_key"]))
    secret = draw(alnum(8, 20))
    shape = draw(st.sampled_from(["list", "object", "number"]))
    if shape == "list":
        return json.dumps({name: [secret, secret[::-1]]}), [secret, secret[::-1]]
    if shape == "object":
        return json.dumps({name: {"value": secret}}), [secret]
    number = draw(st.integers(10**7, 10**12))
    return json.dumps({name: number}), [str(number)]


@st.composite
def formats(draw) -> tuple[str, list[str]]:
    kind = draw(st.sampled_from([
        "sk", "sk-proj", "sk-ant", "akia", "ghp", "gho", "ghs", "github_pat", "xoxb", "xoxp",
        "sk_live", "rk_live", "aiza", "npm", "jwt", "bearer", "basic", "url", "pem", "pgp",
        "openssh",
    ]))
    if kind in ("sk", "sk-proj", "sk-ant"):
        prefix = {"sk": "sk-", "sk-proj": "sk-proj-", "sk-ant": "sk-ant-api03-"}[kind]
        secret = prefix + draw(alnum(20, 60))
        return secret, [secret[len(prefix):]]
    if kind == "akia":
        secret = "AKIA" + draw(alnum(16, 16, UPPER_DIGITS))
        return secret, [secret]
    if kind in ("ghp", "gho", "ghs"):
        secret = f"{kind}_" + draw(alnum(36))
        return secret, [secret[4:]]
    if kind == "github_pat":
        secret = "github_pat_" + draw(alnum(22)) + "_" + draw(alnum(59))
        return secret, [secret[11:]]
    if kind in ("xoxb", "xoxp"):
        secret = f"{kind}-" + draw(alnum(12, 12, "0123456789")) + "-" + draw(alnum(24))
        return secret, [secret[5:]]
    if kind in ("sk_live", "rk_live"):
        secret = f"{kind}_" + draw(alnum(24, 40))
        return secret, [secret[8:]]
    if kind == "aiza":
        secret = "AIza" + draw(alnum(35, 35, B64URL))
        return secret, [secret[4:]]
    if kind == "npm":
        secret = "npm_" + draw(alnum(36))
        return secret, [secret[4:]]
    if kind == "jwt":
        header = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').decode().rstrip("=")
        payload = base64.urlsafe_b64encode(
            json.dumps({"sub": draw(alnum(8, 20))}).encode()).decode().rstrip("=")
        secret = f"{header}.{payload}.{draw(alnum(43, 43, B64URL))}"
        return secret, [payload, secret.rsplit(".", 1)[1]]
    if kind == "bearer":
        token = draw(alnum(10, 40)) + draw(st.sampled_from(["1", ".x9", "-7", "_0"]))
        return f"Authorization: Bearer {token}", [token]
    if kind == "basic":
        user, password = draw(alnum(4, 10)), draw(alnum(8, 16))
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        return f"Authorization: Basic {token}", [token]
    if kind == "url":
        user, password = draw(alnum(6, 10)), draw(alnum(8, 16))
        return f"postgres://{user}:{password}@db.example.com:5432/app", [password, user]
    body = draw(alnum(40, 64, ALNUM + "+/"))
    block = {"pem": "RSA PRIVATE KEY", "pgp": "PGP PRIVATE KEY BLOCK",
             "openssh": "OPENSSH PRIVATE KEY"}[kind]
    return pem(block, body), [body]


SECRETS = st.one_of(formats(), name_value(), non_string_values())


def fragments(secret: str) -> list[str]:
    return [secret[i:i + FRAGMENT] for i in range(max(1, len(secret) - FRAGMENT + 1))]


def assert_nothing_leaks(data: str, parts: list[str], limit: int) -> None:
    assert len(data) <= limit
    for part in parts:
        for fragment in fragments(part):
            assert fragment not in data, (fragment, data[-200:])


def shown(text: str, limit: int) -> dict:
    spec = ToolSpec("t", "Test tool.", "read", 5.0, 1, limit, lambda: text,
                    parameters={"type": "object"})
    result = invoke_tool(ToolRegistry([spec]), "t", {})
    assert result["ok"] is True
    return result


BIG = pem("RSA PRIVATE KEY")  # about 3,400 characters, redacted to 10


@st.composite
def placed(draw) -> tuple[str, list[str], int]:
    """A secret placed relative to the cut, measured in the *redacted* text."""
    secret, parts = draw(SECRETS)
    limit = draw(st.one_of(st.integers(20, 400), st.sampled_from([64, 100, 2000, 3000])))
    blocks = draw(st.sampled_from([0, 0, 1, 3, 5]))  # large redactions before the secret
    where = draw(st.sampled_from(["start", "middle", "before_cut", "across", "after_cut", "far"]))
    redacted_prefix = blocks * (len(REDACTED) + 1)
    target = {
        "start": 0,
        "middle": limit // 2,
        "before_cut": limit - len(secret) - draw(st.integers(0, 10)),
        "across": limit - draw(st.integers(1, max(1, len(secret) - 1))),
        "after_cut": limit + draw(st.integers(0, 20)),
        "far": limit + LOOKAHEAD_CHARS + draw(st.integers(-50, 50)),
    }[where]
    fill = max(0, target - redacted_prefix)
    prefix = "".join(BIG + "\n" for _ in range(blocks)) + "." * fill
    tail = draw(st.sampled_from(["", " end", "\n" + "." * 500, "." * 20_000]))
    return prefix + " " + secret + " " + tail, parts, limit


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=placed())
def test_no_fragment_of_a_secret_is_ever_shown(case):
    text, parts, limit = case
    result = shown(text, limit)
    assert_nothing_leaks(result["data"], parts, limit)
    assert "[REDAC" not in result["data"].replace(REDACTED, "")  # never half a marker


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(secret=SECRETS, limit=st.integers(30, 2500), before=st.integers(0, 3000),
       blocks=st.integers(0, 4))
def test_no_fragment_in_json_rendered_from_a_non_str_value(secret, limit, before, blocks):
    text, parts = secret
    value = {"log": ["." * before] + [BIG] * blocks + [text, "tail"], "count": 3}
    spec = ToolSpec("t", "Test tool.", "read", 5.0, 1, limit, lambda: value,
                    parameters={"type": "object"})
    result = invoke_tool(ToolRegistry([spec]), "t", {})
    # In rendered JSON a secret's quotes are escaped: check both spellings.
    escaped = [json.dumps(p)[1:-1] for p in parts]
    assert_nothing_leaks(result["data"], parts + escaped, limit)


@settings(max_examples=200, deadline=None)
@given(secret=SECRETS, limit=st.integers(1, 300), count=st.integers(1, 30))
def test_many_secrets_in_a_row(secret, limit, count):
    text, parts = secret
    result = shown(" ".join([text] * count), limit)
    assert_nothing_leaks(result["data"], parts, limit)


# ------------------------------------------------------------------ the examples


def test_half_a_key_after_three_pem_blocks_is_never_shown():
    key = "sk-Zq8Yw7Xv6Uu5Tt4Ss3Rr2Qq1Pp0"
    for offset in range(40):
        limit = 100
        text = "\n".join([BIG] * 3) + " " + "." * (limit - 32 - offset) + " " + key + " tail " * 100
        result = shown(text, limit)
        assert_nothing_leaks(result["data"], [key[3:]], limit)
        assert "sk-Zq8" not in result["data"]


def test_the_shown_text_is_complete_after_large_redactions():
    # Five PEM blocks (17,000 characters) shrink to five markers: the text after them is shown.
    text = "\n".join([BIG] * 5) + "\nvisible words after the keys " + "." * 30_000
    result = shown(text, 200)
    assert result["data"].startswith("\n".join([REDACTED] * 5) + "\nvisible words after the keys")
    assert len(result["data"]) == 200 and result["truncated"] is True
    assert result["redactions"] == 5


def test_the_scan_is_bounded_by_the_limit_not_the_output():
    # 10,000 PEM blocks: never scanned whole; what is shown is safe and within the limit.
    text = "\n".join([BIG] * 10_000)
    limit = 500
    fields = shape_output(text, limit, Redactor())
    assert len(fields["data"]) <= limit and "MIIE" not in fields["data"]
    assert fields["truncated"] is True and fields["original_chars"] == len(text)
    scanned = []
    redactor = Redactor()
    original = redactor.spans
    redactor.spans = lambda window: scanned.append(len(window)) or original(window)  # type: ignore[method-assign]
    shape_output(text, limit, redactor)
    assert sum(scanned) <= 2 * SCAN_FACTOR * (limit + LOOKAHEAD_CHARS)


@pytest.mark.parametrize(
    "text, shown_text",
    [
        ("DB_PASSWORD=hunter2 next", f"DB_PASSWORD={REDACTED} next"),
        ("MYSQL_ROOT_PASSWORD=r00tpw", f"MYSQL_ROOT_PASSWORD={REDACTED}"),
        ("GITHUB_TOKEN=abc123xyz", f"GITHUB_TOKEN={REDACTED}"),
        ("access_token=abc123&x=1", f"access_token={REDACTED}&x=1"),
        ("client_secret: cs_987654", f"client_secret: {REDACTED}"),
        ('{"db_password": "p4ss"}', f'{{"db_password": "{REDACTED}"}}'),
        ('{"password": "correct horse battery staple"}', f'{{"password": "{REDACTED}"}}'),
        ("password='two words'", f"password='{REDACTED}'"),
        ('password="with \\"escaped\\" quotes"', f'password="{REDACTED}"'),
        ('{"token": ["abc123", "def456"]}', f'{{"token": "{REDACTED}"}}'),
        ('{"secret": {"nested": "x1"}, "n": 1}', f'{{"secret": "{REDACTED}", "n": 1}}'),
        ('{"api_key": 123456789}', f'{{"api_key": "{REDACTED}"}}'),
        ('{"password": null}', '{"password": null}'),
        ('{"max_tokens": 100, "total_tokens": 523}', '{"max_tokens": 100, "total_tokens": 523}'),
        ("max_tokens=100 prompt_tokens: 7", "max_tokens=100 prompt_tokens: 7"),
        ("Authorization: Basic dXNlcjpwYXNz", f"Authorization: Basic {REDACTED}"),
        ("Bearer tokens are credentials", "Bearer tokens are credentials"),
        ("https://admin:s3cret@db.example.com/x", f"https://{REDACTED}@db.example.com/x"),
        ("https://example.com/a:b", "https://example.com/a:b"),
        ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG", f"aws_secret_access_key = {REDACTED}"),
        ("<db_password>hunter2</db_password>", f"<db_password>{REDACTED}</db_password>"),
        ("run --token abc123 --api-key=xyz9 -v", f"run --token {REDACTED} --api-key={REDACTED} -v"),
        ("export DB_PASSWORD='s3 cr3t'", f"export DB_PASSWORD='{REDACTED}'"),
        ("spring.datasource.password: pw", f"spring.datasource.password: {REDACTED}"),
    ],
)
def test_name_value_forms(text, shown_text):
    result = shown(text, 500)
    assert result["data"] == shown_text


def test_json_escaped_pairs_inside_rendered_json_keep_the_structure():
    value = {"logs": ['"password": "hunter two"', "token=abc123", '{"api_key": "k-123 45"}'],
             "token": ["abc", "def"], "usage": {"total_tokens": 523}}
    spec = ToolSpec("t", "Test tool.", "read", 5.0, 1, 2000, lambda: value,
                    parameters={"type": "object"})
    result = invoke_tool(ToolRegistry([spec]), "t", {})
    decoded = json.loads(result["data"])  # still JSON
    assert decoded == {
        "logs": [f'"password": "{REDACTED}"', f"token={REDACTED}", f'{{"api_key": "{REDACTED}"}}'],
        "token": REDACTED,
        "usage": {"total_tokens": 523},
    }
    assert result["redactions"] == 4


@pytest.mark.parametrize("scheme", ["Basic", "BEARER", "token", "Digest", "negotiate", "ApiKey"])
@pytest.mark.parametrize("name", ["DB_PASSWORD", "token", "client_secret", "x-api-key", "passwd"])
@pytest.mark.parametrize("sep", [": ", "=", " = ", "': "])
def test_a_secret_whose_first_word_is_a_scheme_is_hidden_whole(scheme, name, sep):
    """Only an ``Authorization`` header's value opens with a scheme word that is not secret;
    after any other secret's name the first word is the secret's too, and so is the rest of
    its line after ``:`` (a password may be "basic horse 123")."""
    value = f"{scheme} horse123 battery9"
    head = f"'{name}': " if sep == "': " else f"{name}{sep}"
    data = shown(head + value, 500)["data"]
    if sep == ": ":  # a line's rest: the whole of it
        assert data == f"{head}[REDACTED]"
    else:  # a bare word: the first, which is the scheme's word
        assert data.startswith(f"{head}[REDACTED]")
        assert scheme not in data[len(head):]


@pytest.mark.parametrize("name", ["Authorization", "authorization", "Proxy-Authorization"])
@pytest.mark.parametrize("sep", [": ", "="])
def test_an_authorization_header_shows_its_scheme_and_hides_its_credential(name, sep):
    data = shown(f"{name}{sep}Basic dXNlcjpwYXNzd29yZDEy more", 500)["data"]
    assert data.startswith(f"{name}{sep}Basic [REDACTED]")
    assert "dXNlcjpw" not in data
