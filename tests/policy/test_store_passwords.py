"""A password never appears in a log, an error or a repr, read as libpq reads it
(docs/design.md#operating-the-stores).

libpq takes everything from the user's ``:`` to the ``@`` as the password, a ``?`` or ``#``
included (``postgresql://u:Pw?s3cret@host/db`` is the password ``Pw?s3cret``); a raw ``@`` or
``/`` a person typed in one is misread (as a host, a port, a database), and must not be shown
either. Every hostile password below goes through every place an address is shown: the
public address, the store's ``address`` and ``repr``, ``open_store``'s errors, the errors and
log records of a server that cannot be reached, and a message that quotes the URL.
"""

from __future__ import annotations

import logging
import sys
from typing import Any
from urllib.parse import unquote

import pytest
from test_stores import free_port

from agentkit import open_store
from agentkit.policy.stores import StoreError, public_address
from agentkit.policy.stores.address import libpq_reading, scrub

#: Passwords as a person types them into a URL (some break the URL: that is the point).
#: Each holds "s3cret", which must never be shown, not even as a piece libpq misread.
HOSTILE = [
    "Pw?s3cret",        # libpq: the password Pw?s3cret (the old mask stopped at the ?)
    "Pw#s3cret",        # the same with a #
    "p@ss@s3cret",      # raw @: libpq reads the password "p" and the host "ss@s3cret@..."
    "pa/ss/s3cret",     # raw /: libpq reads no password at all, the host "agent", port "pa"
    "p%40s3cret",       # percent-encoded @: libpq's password is p@s3cret
    "pa:ss:s3cret",     # : inside
    "a?b@c?d#s3cret",   # all of them
    "x&y=z?password=s3cret",  # a query inside the password
    "'; s3cret",        # a quote and a space
]
#: Where a password stands in a URL.
URLS = [
    "postgresql://agent:{pw}@db.internal:5433/agents",
    "postgresql://:{pw}@db.internal/agents",          # no user
    "postgresql://agent:{pw}@h1,h2:5433/agents",      # several hosts
    "postgres://agent:{pw}@db.internal/agents?sslmode=require",
    "postgresql+psycopg://agent:{pw}@db.internal/agents",
]


def secrets(password: str) -> list[str]:
    """The texts that must not be shown: the password as typed and as libpq decodes it."""
    return sorted({password, unquote(password)})


def assert_hidden(text: str, password: str) -> None:
    for secret in [*secrets(password), "s3cret"]:
        assert secret not in text, (secret, text)


@pytest.mark.parametrize("password", HOSTILE)
@pytest.mark.parametrize("template", URLS)
def test_the_public_address_hides_every_password(template: str, password: str) -> None:
    url = template.format(pw=password)
    shown = public_address(url)
    assert_hidden(shown, password)
    assert shown.startswith(url.split(":", 1)[0] + "://") and "***" in shown
    assert "db.internal" in shown or "h1,h2" in shown  # the server is still named
    reading = libpq_reading(shown)  # libpq itself finds no password in what is shown
    if reading is not None:
        assert reading.get("password") in (None, "***")


def test_what_holds_no_password_is_shown_as_it_is() -> None:
    for url in ("postgresql://agent@db.internal:5432/agents",
                "postgresql://agent@h1,h2/agents?sslmode=require",
                "postgresql:///agents?host=/var/run/postgresql",
                "sqlite:////srv/agent/agentkit.sqlite3", "memory:"):
        assert public_address(url) == url


@pytest.mark.parametrize("password", HOSTILE)
def test_a_dsn_of_key_value_words_hides_its_password(password: str) -> None:
    quoted = "'" + password.replace("\\", "\\\\").replace("'", "\\'") + "'"
    for dsn in (f"host=db user=agent password={quoted} dbname=agents",
                f"host=db sslpassword={quoted} user=agent"):
        assert_hidden(public_address(dsn), password)
    if " " not in password and "'" not in password:
        assert_hidden(public_address(f"host=db password={password} user=agent"), password)


def test_a_password_option_is_hidden_whatever_its_spelling() -> None:
    for url in ("postgresql://agent@db/agents?password=s3cret-pw&sslmode=require",
                "postgresql://agent@db/agents?pass%77ord=s3cret-pw",
                "postgresql://agent@db/agents?sslpassword=s3cret-pw",
                "postgresql://agent:first-pw@db/agents?PASSWORD=s3cret-pw"):
        shown = public_address(url)
        assert "s3cret-pw" not in shown and "first-pw" not in shown, shown
        assert "db/agents" in shown


@pytest.mark.parametrize("password", HOSTILE)
def test_without_psycopg_the_mask_is_as_conservative(
    password: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg.conninfo", None)  # import fails: not installed
    monkeypatch.setitem(sys.modules, "psycopg", None)
    for template in URLS:
        url = template.format(pw=password)
        assert libpq_reading(url) is None
        shown = public_address(url)
        assert_hidden(shown, password)
        assert shown.endswith(url[url.rindex("@"):])  # from the last @ on, as it was


@pytest.mark.parametrize("password", HOSTILE)
def test_a_message_quoting_the_url_is_scrubbed(password: str) -> None:
    url = URLS[0].format(pw=password)
    for message in (f'invalid URI: "{url}"', f"could not connect to {url}",
                    f'invalid integer value "{password.split("/")[0]}" for option "port"',
                    f'could not translate host name "{password.split("@")[-1]}@db.internal"',
                    f"failed to resolve host '{password.split('@', 1)[-1]}@db.internal'",
                    f'database "{password.split("/")[-1]}@db.internal/agents" does not exist'):
        assert_hidden(scrub(message, url), password)
    assert scrub('invalid URI query parameter: "nosuch"', url) == (
        'invalid URI query parameter: "nosuch"')


@pytest.mark.parametrize("password", HOSTILE)
def test_the_store_never_shows_the_password(password: str) -> None:
    pytest.importorskip("psycopg")
    for template in URLS:
        url = template.format(pw=password)
        try:
            store: Any = open_store(url, connect_timeout_seconds=0.5)
        except ValueError as exc:  # a URL libpq cannot read: refused with its reason
            assert "not a PostgreSQL URL libpq can read" in str(exc)
            assert_hidden(str(exc), password)
            continue
        try:
            assert_hidden(store.address, password)
            assert_hidden(repr(store), password)
            assert store.address.startswith("postgresql://") and " " not in store.address
        finally:
            store.close()


@pytest.mark.parametrize("password", HOSTILE)
def test_a_server_that_cannot_be_reached_never_shows_the_password(
    password: str, caplog: pytest.LogCaptureFixture,
) -> None:
    pytest.importorskip("psycopg")
    url = f"postgresql://agent:{password}@127.0.0.1:{free_port()}/agents"
    try:
        store: Any = open_store(url, connect_timeout_seconds=0.5)
    except ValueError as exc:
        assert_hidden(str(exc), password)
        return
    errors: list[str] = []
    try:
        with caplog.at_level(logging.DEBUG):
            assert store.run_once("k", lambda: {"ok": True}, "fp")["error"] == "busy"
            for step in (store.purge, lambda: list(store.entries()), store.store_now):
                with pytest.raises(StoreError) as info:
                    step()
                errors.append(str(info.value))
    finally:
        store.close()
    for text in (*errors, caplog.text, *(r.getMessage() for r in caplog.records)):
        assert_hidden(text, password)
    assert caplog.records and all("agent" in e for e in errors)
