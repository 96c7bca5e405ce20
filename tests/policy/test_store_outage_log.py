"""A PostgreSQL server that cannot be reached (docs/design.md#store-failures): every call is
``busy`` and runs nothing, and the log says so once when the outage starts and once when it
ends, instead of psycopg_pool's warnings for every connection attempt (about six per call);
the password is never shown."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from test_stores import Backend, RoundTrips, free_port, pg_dsn, runner_with

PASSWORD = "s3cret-pw"


def counted(caplog: pytest.LogCaptureFixture) -> dict[str, int]:
    """The log so far, as the lines an operator would read."""
    found = {"unreachable": 0, "reachable again": 0, "psycopg.pool": 0}
    for record in caplog.records:
        message = record.getMessage()
        assert PASSWORD not in message
        if record.name.startswith("psycopg"):
            found["psycopg.pool"] += 1
        elif "unreachable, no connection" in message:
            found["unreachable"] += 1
        elif "reachable again" in message:
            found["reachable again"] += 1
    return found


@pytest.fixture
def pg(tmp_path: Path):
    backend = Backend("postgres", tmp_path)
    yield backend
    backend.close()


def test_an_outage_is_one_line_when_it_starts_and_one_when_it_ends(
    pg: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    from psycopg.conninfo import make_conninfo

    from agentkit import PostgresIdempotencyStore

    assert pg.pg is not None
    port = free_port()  # nothing listens there yet: the server is down
    dsn = make_conninfo(pg.pg.dsn, host="127.0.0.1", port=port, password=PASSWORD)
    store = PostgresIdempotencyStore(dsn, connect_timeout_seconds=0.5)
    pg.made.append(store)
    calls: list[int] = []
    runner = runner_with(store, calls)
    caplog.set_level(logging.WARNING)
    for name in ("a.md", "b.md", "c.md"):
        result = runner.call("save", {"name": name})
        assert result["error"] == "busy" and result["retryable"] is True
    assert asyncio.run(runner.acall("save", {"name": "d.md"}))["error"] == "busy"
    assert calls == []
    assert counted(caplog) == {"unreachable": 1, "reachable again": 0, "psycopg.pool": 0}
    outage = next(r for r in caplog.records if "unreachable" in r.getMessage())
    assert outage.levelno == logging.WARNING and f"127.0.0.1:{port}" in outage.getMessage()
    assert "Connection refused" in outage.getMessage()

    proxy = RoundTrips(pg.pg.dsn, port=port)  # the server is back, at the same address
    try:
        assert runner.call("save", {"name": "a.md"})["ok"] is True
        assert runner.call("save", {"name": "b.md"})["ok"] is True
        assert calls == [1, 1]
        assert counted(caplog) == {"unreachable": 1, "reachable again": 1, "psycopg.pool": 0}
    finally:
        proxy.close()  # down again: a second outage, a second pair of lines
    assert runner.call("save", {"name": "c.md"})["error"] == "busy"
    assert runner.call("save", {"name": "e.md"})["error"] == "busy"
    assert calls == [1, 1]
    assert counted(caplog) == {"unreachable": 2, "reachable again": 1, "psycopg.pool": 0}
    assert PASSWORD not in caplog.text and PASSWORD not in repr(store)


def test_other_pools_keep_their_own_warnings(caplog: pytest.LogCaptureFixture) -> None:
    """Only the store's own pools are quietened: another pool of the host still warns."""
    pg_dsn()  # psycopg is installed (skip or fail otherwise)
    import psycopg_pool

    import agentkit.policy.stores.postgres  # noqa: F401 - installs the filter

    warned = threading.Event()

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "theirs" in record.getMessage():
                warned.set()

    seen = Seen(logging.WARNING)
    logger = logging.getLogger("psycopg.pool")
    logger.addHandler(seen)
    pool: Any = psycopg_pool.ConnectionPool(
        f"host=127.0.0.1 port={free_port()} connect_timeout=1", name="theirs", open=False,
        min_size=1, reconnect_timeout=0,
    )
    try:
        pool.open(wait=False)
        assert warned.wait(10)
    finally:
        pool.close()
        logger.removeHandler(seen)
