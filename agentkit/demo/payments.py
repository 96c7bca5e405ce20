"""A payment service that deduplicates by key, as payment APIs do.

A payment API cannot be asked "did my last request land?" by a caller that died before it
read the answer, so the APIs close the gap from their side: the caller sends an
**idempotency key** with each request (an ``Idempotency-Key`` header; an SDK's
``idempotency_key=``), and a second request with a key the service has seen makes no new
payment: it answers the original charge. A request without a key is always a new payment.

:class:`PaymentService` is that service, small and real: its charges live on disk, in a SQLite
file of its own (the provider's database, not the kit's store), so it counts across processes
and across a worker killed mid-call. Each request is one transaction (``BEGIN IMMEDIATE``):
two requests with one key, from two processes at once, make one payment. It counts what a
test or a lesson needs: :attr:`~PaymentService.requests` (every request it answered),
:attr:`~PaymentService.payments` (the real payments among them) and
:attr:`~PaymentService.replays` (requests answered with the original charge)::

    service = PaymentService(workdir / "payments.sqlite3")
    first = service.charge("ACME Ltd", 120, idempotency_key="task-1:send_payment:pay-42")
    again = service.charge("ACME Ltd", 120, idempotency_key="task-1:send_payment:pay-42")
    assert again == first and service.payments == 1 and service.replays == 1

A handler forwards the runner's key for its call (:func:`agentkit.current_call`), the same on
every attempt, in its status lookup and after recovery in another process::

    def send_payment(payment_id: str, to: str, amount: int) -> dict[str, Any]:
        call = agentkit.current_call()
        return service.charge(to, amount, idempotency_key=call.idempotency_key if call else None)

The failure matrix plays it (``killed_after_payment_key_forwarded`` and
``…_key_not_forwarded`` in :mod:`agentkit.demo.scenarios`), and notebook 04 teaches it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["IdempotencyKeyReused", "PaymentService"]

_SCHEMA = (
    ("CREATE TABLE IF NOT EXISTS charges (id INTEGER PRIMARY KEY, idempotency_key TEXT UNIQUE,"
     " recipient TEXT NOT NULL, amount INTEGER NOT NULL, reference TEXT)"),
    ("CREATE TABLE IF NOT EXISTS requests (id INTEGER PRIMARY KEY, idempotency_key TEXT,"
     " outcome TEXT NOT NULL)"),
)
PAID, REPLAYED, REFUSED = "paid", "replayed", "refused"


class IdempotencyKeyReused(ValueError):
    """A key the service has seen came back with other parameters: the service refuses it
    and pays nothing (payment APIs answer this with an error, never with a second charge)."""


class PaymentService:
    """Charges that live in ``path`` (a SQLite file, created when missing); see the module."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._transaction() as db:
            for statement in _SCHEMA:
                db.execute(statement)

    def charge(self, to: str, amount: int, *, idempotency_key: str | None = None,
               reference: str | None = None) -> dict[str, Any]:
        """Pay ``amount`` to ``to`` and return the charge; with an ``idempotency_key`` seen
        before, pay nothing and return the original charge (the same dict). The same key with
        another recipient or amount raises :class:`IdempotencyKeyReused`, paying nothing.
        ``reference`` is kept with a new charge, for :meth:`find` (it deduplicates nothing)."""
        with self._transaction() as db:
            if idempotency_key is not None:
                row = db.execute(
                    "SELECT id, recipient, amount FROM charges WHERE idempotency_key = ?",
                    (idempotency_key,),
                ).fetchone()
                if row is not None:
                    if (row[1], row[2]) != (to, amount):
                        self._log(db, idempotency_key, REFUSED)
                        raise IdempotencyKeyReused(
                            "this idempotency key was first used with other parameters")
                    self._log(db, idempotency_key, REPLAYED)
                    return _receipt(row[0], row[1], row[2])
            cursor = db.execute(
                "INSERT INTO charges (idempotency_key, recipient, amount, reference)"
                " VALUES (?, ?, ?, ?)",
                (idempotency_key, to, amount, reference),
            )
            self._log(db, idempotency_key, PAID)
            assert cursor.lastrowid is not None
            return _receipt(cursor.lastrowid, to, amount)

    def find(self, reference: str) -> dict[str, Any] | None:
        """The first charge made with ``reference``, None when there is none: what a status
        lookup asks a service that can be searched (a payment API's search by metadata)."""
        with self._transaction() as db:
            row = db.execute(
                "SELECT id, recipient, amount FROM charges WHERE reference = ? ORDER BY id",
                (reference,),
            ).fetchone()
        return None if row is None else _receipt(row[0], row[1], row[2])

    @property
    def payments(self) -> int:
        """Real payments made: money that moved."""
        return self._count("SELECT COUNT(*) FROM charges")

    @property
    def requests(self) -> int:
        """Every charge request the service answered (paid, replayed or refused)."""
        return self._count("SELECT COUNT(*) FROM requests")

    @property
    def replays(self) -> int:
        """Requests answered with the original charge of their key: nothing paid."""
        return self._count("SELECT COUNT(*) FROM requests WHERE outcome = ?", (REPLAYED,))

    @property
    def writes(self) -> int:
        """:attr:`payments`, in the failure matrix's word (the writes that landed)."""
        return self.payments

    def charges(self) -> list[dict[str, Any]]:
        """Every charge, oldest first, with the key it was made under (None: no key sent)."""
        with self._transaction() as db:
            rows = db.execute(
                "SELECT id, recipient, amount, idempotency_key FROM charges ORDER BY id"
            ).fetchall()
        return [{**_receipt(i, to, amount), "idempotency_key": key} for i, to, amount, key in rows]

    def _count(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        with self._transaction() as db:
            return int(db.execute(sql, params).fetchone()[0])

    @staticmethod
    def _log(db: sqlite3.Connection, key: str | None, outcome: str) -> None:
        db.execute("INSERT INTO requests (idempotency_key, outcome) VALUES (?, ?)", (key, outcome))

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One connection, one ``BEGIN IMMEDIATE`` transaction: committed when the block ends
        (or refuses a reused key: the refusal is logged), rolled back on any other exception;
        then closed."""
        db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except IdempotencyKeyReused:
                db.execute("COMMIT")
                raise
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        finally:
            db.close()

    def __repr__(self) -> str:
        return f"PaymentService({self.path.name!r})"


def _receipt(charge_id: int, to: str, amount: int) -> dict[str, Any]:
    return {"charge": f"ch_{charge_id}", "to": to, "amount": amount, "status": "succeeded"}
