"""A PostgreSQL server that answers and refuses the login (a wrong password) is said so at
once, in libpq's words without the password, not as "no connection within 5 s" after the
connect bound (issue 42).

The server here is a stand-in on the loopback that speaks just enough of the protocol to
refuse: it declines TLS and GSS encryption, then answers the startup message with the
``FATAL 28P01`` error a real server sends for a wrong password. No PostgreSQL is needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("psycopg_pool")

from agentkit import PostgresIdempotencyStore, ToolRegistry, ToolRunner, ToolSpec
from agentkit.policy.stores import StoreError

PASSWORD = "hunter2-s3cret"
#: Far longer than a refusal takes: the old code waited all of it before saying anything.
CONNECT_BOUND = 30.0
_SSL_OR_GSS = (80877103, 80877104)


def _refuse(conn: socket.socket, refusals: list[int]) -> None:
    with conn:
        while True:
            head = conn.recv(8, socket.MSG_WAITALL)
            if len(head) < 8:
                return
            length, code = struct.unpack("!ii", head)
            if length > 8:
                conn.recv(length - 8, socket.MSG_WAITALL)
            if code in _SSL_OR_GSS:
                conn.sendall(b"N")  # no TLS, no GSS: the startup message comes next
                continue
            fields = (b"SFATAL\0VFATAL\0C28P01\0"
                      b'Mpassword authentication failed for user "agent"\0\0')
            conn.sendall(b"E" + struct.pack("!i", len(fields) + 4) + fields)
            refusals.append(1)
            return


@pytest.fixture
def refusing_server() -> Iterator[tuple[int, list[int]]]:
    listener = socket.create_server(("127.0.0.1", 0))
    refusals: list[int] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=_refuse, args=(conn, refusals), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], refusals
    finally:
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() (close alone does not)
        listener.close()
        thread.join(10)
        assert not thread.is_alive()


def _store(port: int) -> PostgresIdempotencyStore:
    return PostgresIdempotencyStore(f"postgresql://agent:{PASSWORD}@127.0.0.1:{port}/agents",
                                    connect_timeout_seconds=CONNECT_BOUND)


def test_a_wrong_password_is_said_at_once_and_never_shows_the_password(refusing_server) -> None:
    port, refusals = refusing_server
    store = _store(port)
    try:
        began = time.monotonic()
        with pytest.raises(StoreError) as raised:
            store.purge()
        took = time.monotonic() - began
    finally:
        store.close()
    said = str(raised.value)
    assert took < CONNECT_BOUND / 3, f"{took:.1f} s: the refusal waited for the connect bound"
    assert "password authentication failed" in said, said
    assert "no connection within" not in said, said
    assert said.startswith(f"postgresql://agent@127.0.0.1:{port}/agents: "), said
    assert PASSWORD not in said and PASSWORD not in repr(store)
    assert refusals, "the stand-in server was never asked"


def test_a_runner_on_a_refusing_server_runs_nothing_and_says_why(refusing_server, caplog) -> None:
    port, _ = refusing_server
    calls: list[str] = []

    def save(name: str) -> str:
        calls.append(name)
        return name

    store = _store(port)
    runner = ToolRunner(ToolRegistry([ToolSpec("save", "Save.", "reversible_write", 2.0, 3, 100,
                                               save)]), store=store)
    try:
        began = time.monotonic()
        result = runner.call("save", {"name": "a.md"})
        assert time.monotonic() - began < CONNECT_BOUND / 3
        assert result["ok"] is False and calls == []
        assert asyncio.run(runner.acall("save", {"name": "b.md"}))["ok"] is False
        assert calls == []
    finally:
        store.close()
    assert PASSWORD not in caplog.text
