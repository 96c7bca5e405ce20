"""``agentkit.open_store(url)``: one address per store (docs/design.md#operating-the-stores).

SQLAlchemy's reading of ``sqlite:`` URLs (three slashes and a relative path, four and an
absolute one), PostgreSQL URLs handed to libpq as they are, settings as keywords, and a
``ValueError`` that names the scheme of a URL that names no store. A password never appears
in an error, a log or a repr.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

import agentkit
from agentkit import IdempotencyStore, SQLiteIdempotencyStore, open_store
from agentkit.policy.stores import public_address

PASSWORD = "s3cret-pw"


def test_memory() -> None:
    for url in ("memory:", "memory://", "MEMORY:"):
        store = open_store(url, claim_ttl_seconds=60, retention_seconds=None)
        assert type(store) is IdempotencyStore
        assert (store.claim_ttl_seconds, store.retention_seconds) == (60.0, None)


def test_sqlite_relative_and_absolute_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with open_store("sqlite:///data/rel.sqlite3") as store:
        assert type(store) is SQLiteIdempotencyStore and store.path == "data/rel.sqlite3"
        store.run_once("k", lambda: {"ok": True}, "fp")
    assert (tmp_path / "data" / "rel.sqlite3").is_file()
    absolute = tmp_path / "abs" / "store.sqlite3"
    with open_store(f"sqlite:///{absolute}", retention_seconds=3600) as store:  # four slashes
        assert f"sqlite:///{absolute}".startswith("sqlite:////")
        assert store.path == str(absolute) and store.retention_seconds == 3600
    assert absolute.is_file()


def test_postgresql_urls_go_to_libpq_as_they_are() -> None:
    pytest.importorskip("psycopg")
    from agentkit.policy.stores.postgres import PostgresIdempotencyStore

    for url in (f"postgresql://agent:{PASSWORD}@db.internal:5433/agents",
                f"postgres://agent:{PASSWORD}@db.internal:5433/agents",
                f"postgresql+psycopg://agent:{PASSWORD}@db.internal:5433/agents"):
        store = open_store(url, claim_ttl_seconds=90, connect_timeout_seconds=1)
        try:
            assert type(store) is PostgresIdempotencyStore
            assert store.address == "postgresql://agent@db.internal:5433/agents"
            assert PASSWORD not in repr(store) and store.claim_ttl_seconds == 90
        finally:
            store.close()  # nothing connected: a store connects on its first call


@pytest.mark.parametrize(("url", "names"), [
    (f"mysql://agent:{PASSWORD}@db/agents", ["unknown store scheme 'mysql'", "mysql://agent:***@db/agents"]),
    ("redis://localhost:6379", ["unknown store scheme 'redis'"]),
    ("agentkit.sqlite3", ["no scheme", "write sqlite:///agentkit.sqlite3"]),
    ("", ["no scheme"]),
    (f"host=db user=agent password={PASSWORD}", ["no scheme", "password=***"]),
    ("memory:somewhere", ["a memory store has no path"]),
    ("sqlite://", ["needs a file path"]),
    ("sqlite:///", ["needs a file path"]),
    ("sqlite:///:memory:", ["for a store in memory, write memory:"]),
    ("sqlite:relative.db", ["write sqlite:///relative/path"]),
    ("sqlite://db.example/x.sqlite3", ["not on host 'db.example'"]),
    ("sqlite:///x.sqlite3?mode=ro", ["takes no query"]),
    (f"postgresql://agent:{PASSWORD}@db/agents?nosuch=1", ["not a PostgreSQL URL", "nosuch"]),
    (f"postgresql://agent:{PASSWORD}@[db/agents", ["not a PostgreSQL URL"]),
])
def test_a_url_that_names_no_store_is_a_clear_value_error(url: str, names: list[str]) -> None:
    if url.startswith("postgresql"):
        pytest.importorskip("psycopg")
    with pytest.raises(ValueError) as info:
        open_store(url)
    message = str(info.value)
    assert PASSWORD not in message and "\n" not in message
    for name in names:
        assert name in message, (name, message)


def test_settings_are_the_stores_keywords(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="no_such_setting"):
        open_store("memory:", no_such_setting=1)
    with pytest.raises(ValueError, match="retention_seconds"):
        open_store(f"sqlite:///{tmp_path / 's.sqlite3'}", retention_seconds=0)
    with pytest.raises(TypeError, match="a store URL is a str"):
        open_store(tmp_path / "s.sqlite3")  # type: ignore[arg-type]


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://agent:pw@db/agents", "postgresql://agent:***@db/agents"),
    ("postgresql://agent:p@ss/word@db/agents", "postgresql://agent:***@db/agents"),
    ("postgresql://agent:p%40ss@db/agents?password=x&sslmode=require",
     "postgresql://agent:***@db/agents?password=***&sslmode=require"),
    ("host=db password='a b' user=agent", "host=db password=*** user=agent"),
    ("postgresql://agent@db:5432/agents", "postgresql://agent@db:5432/agents"),
    ("sqlite:////srv/a.db", "sqlite:////srv/a.db"),
])
def test_public_address_never_shows_a_password(url: str, shown: str) -> None:
    assert public_address(url) == shown


def test_a_server_that_cannot_be_reached_never_logs_the_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pytest.importorskip("psycopg")
    from test_stores import free_port

    store: Any = agentkit.open_store(
        f"postgresql://agent:{PASSWORD}@127.0.0.1:{free_port()}/agents", connect_timeout_seconds=0.5)
    try:
        with caplog.at_level(logging.DEBUG):
            assert store.run_once("k", lambda: {"ok": True}, "fp")["error"] == "busy"
            with pytest.raises(agentkit.policy.stores.StoreError) as info:
                store.purge()
    finally:
        store.close()
    assert "no connection" in str(info.value) and PASSWORD not in str(info.value)
    assert caplog.records and PASSWORD not in caplog.text
