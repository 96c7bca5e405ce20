"""Operating the stores (docs/design.md#operating-the-stores): retention and purge, listing,
copying a store into another, and why a claim stays O(log n) while a purge runs.

Every test runs on the three backends and counts the operation's real runs: a purged key
runs again (that is what purging means), a kept one replays, a claim is never touched.
Time passes by the store's clock (the memory and SQLite stores take an injected clock; the
PostgreSQL rows are aged in place, since the database's clock cannot be moved).
"""

from __future__ import annotations

import contextlib
import json
import math
import sqlite3
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest
from test_store_migration import release  # tests/ is on sys.path
from test_stores import OK, TINY_TTL, UNKNOWN, WAIT, Backend, Hung, Op, PgSchema

from agentkit.policy.stores import (
    DEFAULT_RETENTION_SECONDS,
    ApprovalEntry,
    IdempotencyStore,
    KeyEntry,
    PostgresIdempotencyStore,
    SQLiteIdempotencyStore,
    copy_store,
    operations,
)
from agentkit.policy.stores.audit import (
    export_lines,
    load_public_key,
    load_signer,
    new_signing_key,
    verify_lines,
)

DAY = 86_400.0
RETENTION = 100.0


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path):
    made = Backend(request.param, tmp_path)
    yield made
    made.close()


def let_pass(backend: Backend, seconds: float) -> None:
    """``seconds`` pass for every row the store holds now: leases, completions, approvals."""
    backend.advance(seconds)
    if backend.pg is not None:
        for table in ("agentkit_keys", "agentkit_approvals"):
            if backend.pg.execute("SELECT to_regclass(%s) IS NOT NULL", (table,))[0][0]:
                backend.pg.execute(
                    f"UPDATE {table} SET updated_at = updated_at - make_interval(secs => %s)",
                    (seconds,),
                )


def keys_of(store: Any) -> dict[str, str]:
    return {entry.key: entry.state for entry in store.entries()}


def approval(store: Any, approval_id: str, state: str, **fields: Any) -> None:
    store.create_approval(approval_id, {"approval_id": approval_id, "state": "pending", **fields})
    if state != "pending":
        assert store.update_approval(approval_id, "pending",
                                     {"approval_id": approval_id, "state": state, **fields})


# --------------------------------------------------------------------------- retention


def test_purge_deletes_only_completed_keys_past_retention(backend: Backend) -> None:
    store = backend(retention_seconds=RETENTION)
    old, young = Op(OK), Op(OK)
    assert store.run_once("old", old, "fp") == OK
    let_pass(backend, 60)
    assert store.run_once("young", young, "fp") == OK
    let_pass(backend, 60)  # old completed 120 s ago, young 60 s ago
    assert store.purge() == 1
    assert keys_of(store) == {"young": "completed"}
    assert store.run_once("young", young, "fp")["replayed"] is True
    assert store.run_once("old", old, "fp") == OK  # a purged key may run again
    assert (old.calls, young.calls) == (2, 1)
    assert store.purge() == 0


def test_purge_never_touches_a_claim_live_or_stale(backend: Backend) -> None:
    store = backend(0.1, retention_seconds=RETENTION)
    hung, unknown = Hung(), Op(UNKNOWN)
    assert store.run_once("unknown", unknown, "fp") == UNKNOWN  # stale once its lease passes
    answers: list[dict[str, Any]] = []
    running = threading.Thread(target=lambda: answers.append(store.run_once("running", hung, "fp")))
    running.start()
    try:
        assert hung.entered.wait(WAIT)
        let_pass(backend, 10 * DAY)
        assert store.purge() == 0
        assert keys_of(store) == {"running": "claimed", "unknown": "claimed"}
        again = Op(OK)
        assert store.run_once("running", again, "fp")["error"] == "in_progress"
        assert store.run_once("unknown", again, "fp")["error"] == "outcome_unknown"
        assert again.calls == 0
    finally:
        hung.go.set()
        running.join(WAIT)
    assert answers == [OK] and hung.calls == 1
    assert store.run_once("running", Op(OK), "fp")["replayed"] is True


def test_purge_deletes_settled_and_expired_approvals_never_a_pending_one(backend: Backend) -> None:
    store = backend(retention_seconds=RETENTION)
    now = store.store_now()
    far = now + 30 * DAY  # a time to live longer than retention: still pending, still decidable
    approval(store, "settled-old", "settled", result={"ok": True})
    approval(store, "expired-old", "expired", expires_at=now)
    approval(store, "running-old", "running", running_until=now + 1)
    approval(store, "pending-long", "pending", expires_at=far)
    # It ran out 190 s ago, longer than retention: nobody can approve it any more.
    approval(store, "pending-ran-out", "pending", expires_at=now - 2 * RETENTION + 10)
    let_pass(backend, 2 * RETENTION)
    approval(store, "settled-young", "settled", result={"ok": True})
    approval(store, "pending-young", "pending", expires_at=store.store_now() + 10)
    purged = store.purge_counts()
    assert (purged.keys, purged.approvals) == (0, 3)
    assert [(a.approval_id, a.state) for a in store.approval_page()] == [
        ("running-old", "running"), ("pending-long", "pending"),
        ("settled-young", "settled"), ("pending-young", "pending")]
    assert [r["approval_id"] for r in store.list_approvals("pending")] == [
        "pending-long", "pending-young"]


def test_retention_none_keeps_everything(backend: Backend) -> None:
    store, op = backend(retention_seconds=None), Op(OK)
    store.run_once("k", op, "fp")
    approval(store, "a", "settled")
    let_pass(backend, 10 * 365 * DAY)
    assert store.purge() == 0
    assert store.purge_counts().before is None
    assert store.run_once("k", op, "fp")["replayed"] is True and op.calls == 1


def test_retention_defaults_to_seven_days(backend: Backend) -> None:
    store, op = backend(), Op(OK)
    assert store.retention_seconds == DEFAULT_RETENTION_SECONDS == 7 * DAY
    store.run_once("k", op, "fp")
    let_pass(backend, 7 * DAY - 60)
    assert store.purge() == 0
    let_pass(backend, 120)
    assert store.purge() == 1


def test_purge_takes_now_by_the_store_clock(backend: Backend) -> None:
    store, op = backend(retention_seconds=RETENTION), Op(OK)
    store.run_once("k", op, "fp")
    now = store.store_now()
    assert store.purge(now=now + RETENTION / 2) == 0
    assert store.purge(now=now + 2 * RETENTION) == 1
    with pytest.raises(ValueError, match="finite number"):
        store.purge(now=math.nan)


@pytest.mark.parametrize(("value", "error"), [
    (0, ValueError), (-1, ValueError), (math.nan, ValueError), (math.inf, ValueError),
    ("7", TypeError), (True, TypeError),
])
def test_retention_must_be_positive_seconds_or_none(value: Any, error: type, tmp_path: Path) -> None:
    with pytest.raises(error, match="retention_seconds"):
        IdempotencyStore(retention_seconds=value)
    with pytest.raises(error, match="retention_seconds"):
        SQLiteIdempotencyStore(tmp_path / "s.sqlite", retention_seconds=value)


def test_purge_in_many_windows_deletes_exactly_the_expired(backend: Backend) -> None:
    """Thousands of keys, old and young and claimed, interleaved across many windows."""
    store = backend(retention_seconds=RETENTION)
    now = store.store_now()
    old = [KeyEntry(f"k{i:05d}", "fp", '{"ok":true}', None, now - 2 * RETENTION)
           for i in range(0, 6000, 2)]
    young = [KeyEntry(f"k{i:05d}", "fp", '{"ok":true}', None, now) for i in range(1, 6000, 4)]
    claims = [KeyEntry(e.key, "fp", None, store.new_claim("fp", now - 3 * RETENTION, 1.0),
                       now - 3 * RETENTION) for e in (
        KeyEntry(f"k{i:05d}", None, None, None, None) for i in range(3, 6000, 4))]
    assert store.add_keys(old + young + claims) == 6000
    assert store.purge() == len(old) == 3000
    assert keys_of(store) == {**{e.key: "completed" for e in young},
                              **{e.key: "claimed" for e in claims}}


def test_a_purge_holds_no_claim_up_between_its_steps(backend: Backend, monkeypatch) -> None:
    """The purge is stopped in its pause after its first step: a new key's claim, a replay
    and a completion all go through at once, and the purge then finishes."""
    store = backend(retention_seconds=RETENTION)
    now = store.store_now()
    store.add_keys([KeyEntry(f"k{i:05d}", "fp", '{"ok":true}', None, now - 2 * RETENTION)
                    for i in range(2000)])
    paused, go = threading.Event(), threading.Event()

    def sleep(seconds: float) -> None:
        paused.set()
        assert go.wait(WAIT)

    monkeypatch.setattr(operations, "time", types.SimpleNamespace(monotonic=time.monotonic,
                                                                   sleep=sleep))
    purged: list[int] = []
    purge = threading.Thread(target=lambda: purged.append(store.purge()))
    if backend.kind == "memory":  # the memory store needs no pauses: its steps are microseconds
        purge.start()
        purge.join(WAIT)
        assert purged == [2000]
        return
    purge.start()
    try:
        assert paused.wait(WAIT)
        op = Op(OK)
        assert store.run_once("fresh", op, "fp") == OK
        assert store.run_once("fresh", op, "fp")["replayed"] is True
        assert store.run_once("k01999", op, "fp")["replayed"] is True  # not purged yet
        assert op.calls == 1
    finally:
        go.set()
        purge.join(WAIT)
    assert purged == [2000]
    assert keys_of(store) == {"fresh": "completed"}


class FakeTime:
    """``operations.time`` for the pacing tests: a clock that each step and tidy advance, and
    the pauses the purge asked for."""

    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(round(seconds, 6))
        self.now += seconds


@pytest.mark.parametrize(("pause", "took", "tidy", "rest"), [
    (0.0, 0.004, 0.010, 0.014),    # PostgreSQL: a 10 ms flush; then as long as step and flush
    (0.0, 0.004, 0.0, 0.004),      # no tidying: as long as the step
    (0.025, 0.004, 0.003, 0.022),  # SQLite: the 25 ms pause counts its checkpoint
    (0.025, 0.030, 0.003, 0.033),  # a long step: as long as it and its checkpoint again
])
def test_the_purge_rests_after_its_tidying_as_long_as_its_work_took(
    monkeypatch, pause: float, took: float, tidy: float, rest: float,
) -> None:
    """The tidying (a checkpoint, a log flush) is the purge's own work: it does not count as
    the rest that gives the workers their turn, which lasts at least as long as the step
    and the tidying took (so a purge takes at most half the time), and at least ``pause``."""
    fake = FakeTime()
    monkeypatch.setattr(operations, "time", fake)
    ends = iter(["k2", "k4", None])

    def step(after: str | None, before: float, window: int) -> tuple[str | None, int, None]:
        fake.now += took
        return next(ends), 2, None

    def tidying() -> None:
        fake.now += tidy

    assert operations.purge_in_windows(
        100.0, keys=step, approvals=lambda after, before, window: (None, 0, None), pending=[],
        delete_pending=lambda approval_id, record: False, pause=pause, tidy=tidying,
    ) == (6, 0)
    assert fake.pauses == [rest, rest]  # after each step that deleted and did not end the walk


PACE = operations.LogPace(step_bytes=100_000, bytes_per_second=1_000_000)


class LoggingSteps:
    """A key space of ``rows`` rows, all expired, whose DELETE writes ``per_row(i)`` bytes of
    log for row ``i`` (a page's first change after a checkpoint logs its whole image) and
    takes ``seconds_per_row`` by the fake clock: the windows asked for and what each wrote."""

    def __init__(self, fake: FakeTime, rows: int, per_row: Any, seconds_per_row: float) -> None:
        self.fake, self.rows, self.per_row, self.seconds = fake, rows, per_row, seconds_per_row
        self.done = 0
        self.steps: list[tuple[int, int]] = []  # (window, bytes logged)

    def __call__(self, after: str | None, before: float, window: int) -> tuple[str | None, int, int]:
        if self.done >= self.rows:
            return None, 0, 0
        first, self.done = self.done, min(self.rows, self.done + window)
        logged = sum(self.per_row(i) for i in range(first, self.done))
        self.fake.now += (self.done - first) * self.seconds
        self.steps.append((window, logged))
        return f"k{self.done:07d}", self.done - first, logged


def run_paced(monkeypatch, steps: LoggingSteps, pace: Any) -> tuple[int, int]:
    monkeypatch.setattr(operations, "time", steps.fake)
    return operations.purge_in_windows(
        100.0, keys=steps, approvals=lambda after, before, window: (None, 0, 0), pending=[],
        delete_pending=lambda approval_id, record: False, pause=0.0, log_pace=pace)


def test_a_paced_purge_shrinks_its_window_to_the_log_a_step_may_write(monkeypatch) -> None:
    """400 bytes of log per row (whole page images), fast steps: time alone would grow the
    window to 1,024 rows (410 KB a step); the pace keeps every step after the first under
    its 100 KB, and the window grows again once the rows cost little log (60 bytes each)."""
    fake = FakeTime()
    cheap_from = 20_000
    steps = LoggingSteps(fake, 40_000, lambda i: 400 if i < cheap_from else 60, 1e-6)
    assert run_paced(monkeypatch, steps, PACE) == (40_000, 0)
    windows = [window for window, _ in steps.steps]
    assert windows[0] == 256 and steps.steps[0][1] == 256 * 400  # the first: no measure yet
    assert all(logged <= PACE.step_bytes for _, logged in steps.steps[1:])
    assert max(windows[1:]) == 1024  # grown again on cheap rows
    assert {w for w, _ in steps.steps[1:40]} == {250}  # 100,000 / 400
    # without a pace, the same steps grow to 1,024 rows at once: 410 KB of log a step
    unpaced = LoggingSteps(FakeTime(), 40_000, lambda i: 400 if i < cheap_from else 60, 1e-6)
    assert run_paced(monkeypatch, unpaced, None) == (40_000, 0)
    assert max(logged for _, logged in unpaced.steps) == 1024 * 400


def test_a_paced_purge_rests_until_its_log_rate_is_under_the_pace(monkeypatch) -> None:
    """Each step logs 100 KB in 4 ms: at 1 MB/s the step and its rest last 100 ms (a rest of
    96 ms, not the 4 ms the step's time alone asks), so 1 MB of log takes 1 s in all."""
    fake = FakeTime()
    steps = LoggingSteps(fake, 2_500, lambda i: 400, 0.004 / 250)
    assert run_paced(monkeypatch, steps, PACE) == (2_500, 0)
    assert [w for w, _ in steps.steps] == [256] + [250] * 9
    assert fake.pauses[1:9] == [0.096] * 8
    assert sum(logged for _, logged in steps.steps) == 1_000_000
    assert fake.now == pytest.approx(1.0)
    # without a pace: each rest as long as its step; 40 ms of steps take 80 ms in all
    unpaced = LoggingSteps(FakeTime(), 2_500, lambda i: 400, 0.004 / 250)
    run_paced(monkeypatch, unpaced, None)
    assert unpaced.fake.now == pytest.approx(0.080)


@pytest.mark.parametrize(("window", "took", "logged", "pace", "following"), [
    (256, 0.001, None, PACE, 512),       # no log measured: time alone (fast: doubled)
    (256, 0.001, 20_000, PACE, 512),     # far under the log a step may write: time alone
    (256, 0.001, 80_000, PACE, 320),     # near it: grown only as far as 100 KB allows
    (256, 0.001, 200_000, PACE, 128),    # twice what a step may write: half the window
    (256, 0.010, 200_000, PACE, 128),    # slow too: halved once, not twice
    (256, 0.001, 2_000_000, PACE, 16),   # never fewer than 16 rows
    (1024, 0.001, 50_000, PACE, 1024),   # never more than 1,024
    (256, 0.001, 200_000, None, 512),    # no pace: time alone
])
def test_the_next_window(window: int, took: float, logged: int | None, pace: Any,
                         following: int) -> None:
    assert operations.next_window(window, took, logged, pace) == following


@pytest.mark.parametrize(("work", "pause", "logged", "pace", "rest"), [
    (0.004, 0.0, None, PACE, 0.004),      # no log measured: as long as the work
    (0.004, 0.0, 2_000, PACE, 0.004),     # 2 KB at 1 MB/s: 2 ms, under the work's 4 ms
    (0.004, 0.0, 100_000, PACE, 0.096),   # 100 KB at 1 MB/s: 100 ms in all
    (0.004, 0.025, 10_000, PACE, 0.025),  # the store's own pause, longer
    (0.004, 0.0, 100_000, None, 0.004),   # no pace
])
def test_the_rest_after_a_step(work: float, pause: float, logged: int | None, pace: Any,
                               rest: float) -> None:
    assert operations.rest_after(work, pause, logged, pace) == pytest.approx(rest)


@pytest.mark.parametrize(("step_bytes", "per_second"), [(0, 1.0), (1, 0.0), (1, math.nan)])
def test_a_log_pace_is_positive(step_bytes: int, per_second: float) -> None:
    with pytest.raises(ValueError, match="log pace"):
        operations.LogPace(step_bytes, per_second)


@contextlib.contextmanager
def expired_pg_store(keys: int, *, young: bool = False) -> Iterator[tuple[PgSchema, Any]]:
    """A PostgreSQL store in a schema of its own holding ``keys`` keys completed well before
    the retention (and, if ``young``, one completed now); closed and dropped afterwards."""
    pg = PgSchema()
    store: Any = None
    try:
        store = PostgresIdempotencyStore(pg.dsn, 300, retention_seconds=RETENTION)
        now = store.store_now()
        store.add_keys([KeyEntry(f"k{i:05d}", "fp", '{"ok":true}', None, now - 2 * RETENTION)
                        for i in range(keys)]
                       + ([KeyEntry("young", "fp", '{"ok":true}', None, now)] if young else []))
        yield pg, store
    finally:
        if store is not None:
            store.close()
        pg.drop()


def test_pg_each_purge_step_has_its_log_flushed_before_the_purge_rests(monkeypatch) -> None:
    """On a real server: every DELETE step commits durably (on a connection whose commits
    wait for the log's flush), so by the time it returns the write-ahead log is flushed past
    where it began, and no worker's claim has to flush the purge's log in its own commit.

    (The flushed position is compared with where the step began, not with the server's
    insert position after it: other sessions' relaxed commits move that one on at any time.)"""
    with expired_pg_store(3000) as (pg, store):
        events: list[str] = []
        window, connection = store._purge_window, store._connection
        commits: list[str] = []  # synchronous_commit of each connection a step used

        @contextlib.contextmanager
        def watched(durable: bool = True) -> Iterator[Any]:
            with connection(durable) as conn:
                yield conn
                commits.append(conn.execute("SHOW synchronous_commit").fetchone()[0])

        def lsn(function: str) -> int:
            return int(pg.execute(f"SELECT {function}() - '0/0'::pg_lsn")[0][0])

        def stepped(*args: Any) -> tuple[str | None, int, int | None]:
            began = lsn("pg_current_wal_insert_lsn")
            commits.clear()
            end, gone, logged = window(*args)
            if gone:
                events.append("step")
                assert commits == ["on"]  # the step's one connection waits for the flush
                assert logged is not None and logged > 0
                assert lsn("pg_current_wal_flush_lsn") >= began
            return end, gone, logged

        monkeypatch.setattr(store, "_purge_window", stepped)
        monkeypatch.setattr(store, "_connection", watched)
        monkeypatch.setattr(operations, "time", types.SimpleNamespace(
            monotonic=time.monotonic, sleep=lambda seconds: events.append("rest")))
        assert store.purge() == 3000
        assert keys_of(store) == {}
    steps = events.count("step")
    assert steps >= 3  # 3,000 keys, windows of at most 1,024
    assert events == ["step", "rest"] * steps


def test_pg_a_purge_is_paced_by_the_log_its_steps_wrote(monkeypatch) -> None:
    """On a real server: each step tells the log it wrote (whole page images after a
    checkpoint), no more than the server's log grew around it; the window shrinks to a
    small pace's bytes, and each rest lasts until the step's log is under its rate."""
    from agentkit.policy.stores import postgres

    pace = operations.LogPace(step_bytes=8 * 1024, bytes_per_second=1e9)
    monkeypatch.setattr(postgres, "PURGE_LOG_PACE", pace)
    with expired_pg_store(3000) as (pg, store):
        pg.execute("CHECKPOINT")  # every page's first change now logs its whole image
        window = store._purge_window
        steps: list[tuple[int, int, int]] = []  # (window, the step's log, the server's)
        rests: list[float] = []

        def lsn() -> int:
            return int(pg.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn")[0][0])

        def stepped(*args: Any) -> tuple[str | None, int, int | None]:
            began = lsn()
            end, gone, logged = window(*args)
            if gone:
                assert logged is not None
                steps.append((args[5], logged, lsn() - began))
            return end, gone, logged

        monkeypatch.setattr(store, "_purge_window", stepped)
        monkeypatch.setattr(operations, "time", types.SimpleNamespace(
            monotonic=time.monotonic, sleep=rests.append))
        assert store.purge() == 3000
        assert keys_of(store) == {}
    assert all(0 < logged <= around for _, logged, around in steps)
    first_window, first_log, _ = steps[0]
    assert first_window == 256 and first_log > 256 * 100  # page images: over 100 B a key
    # the next window is the one that would have written 8 KiB at the first's bytes per key
    # (smaller than the time alone asks, whether it doubles or halves the window)
    assert steps[1][0] == max(16, 256 * pace.step_bytes // first_log) < 128
    assert sum(logged for _, logged, _ in steps) < 2 * pace.step_bytes * len(steps)


def test_pg_a_server_that_does_not_tell_its_log_is_purged_by_time_alone(monkeypatch) -> None:
    """A server that refuses ``pg_current_wal_insert_lsn()`` (Aurora, a user without the
    right): the purge deletes the same keys, its steps report no log, and no pace is used."""
    from agentkit.policy.stores import postgres

    monkeypatch.setattr(postgres, "_LOG_AT", ", agentkit_no_such_function()")
    paces: list[Any] = []
    real = postgres.purge_in_windows

    def recorded(*args: Any, **kwargs: Any) -> tuple[int, int]:
        paces.append(kwargs["log_pace"])
        return real(*args, **kwargs)

    monkeypatch.setattr(postgres, "purge_in_windows", recorded)
    with expired_pg_store(1500, young=True) as (_, store):
        logs: list[int | None] = []
        window = store._purge_window

        def stepped(*args: Any) -> tuple[str | None, int, int | None]:
            done = window(*args)
            logs.append(done[2])
            return done

        monkeypatch.setattr(store, "_purge_window", stepped)
        assert store.purge() == 1500
        assert keys_of(store) == {"young": "completed"}
    assert paces == [None] and len(logs) >= 3 and set(logs) == {None}


# --------------------------------------------------------------------------- listing and copying


def test_entries_list_every_key_in_key_order(backend: Backend) -> None:
    store = backend()
    store.run_once("b", Op(OK), "fp-b")
    store.run_once("a", Op(UNKNOWN), "fp-a")
    entries = list(store.entries(page=1))
    assert [(e.key, e.state, e.fingerprint) for e in entries] == [
        ("a", "claimed", "fp-a"), ("b", "completed", "fp-b")]
    assert entries[0].claim is not None and entries[0].claim.fingerprint == "fp-a"
    assert entries[1].result == '{"data":"written","ok":true}' and entries[1].claim is None
    assert store.key_entry("b") == entries[1] and store.key_entry("nope") is None


@pytest.mark.parametrize("target_kind", ["memory", "sqlite", "postgres"])
def test_copy_moves_keys_and_approvals_so_nothing_runs_again(
    backend: Backend, target_kind: str, tmp_path: Path
) -> None:
    source = backend(TINY_TTL)
    done, unknown = Op(OK), Op(UNKNOWN)
    assert source.run_once("done", done, "fp") == OK
    assert source.run_once("hung", unknown, "fp") == UNKNOWN
    approval(source, "a1", "settled", n=1)
    approval(source, "a2", "pending", n=2, expires_at=source.store_now() + 3600)
    backend.advance(1.0)  # the unknown claim's lease passes: a live one is not copied
    other = Backend(target_kind, tmp_path / "target")
    try:
        target = other(TINY_TTL)
        target.run_once("theirs", Op(OK), "fp")
        copied = copy_store(source, target)
        assert (copied.keys, copied.keys_present, copied.approvals, copied.approvals_present) == (
            2, 0, 2, 0)
        again = copy_store(source, target)  # a second copy changes nothing
        assert (again.keys, again.keys_present, again.approvals, again.approvals_present) == (
            0, 2, 0, 2)
        op = Op(OK)
        assert target.run_once("done", op, "fp") == {**OK, "replayed": True}
        assert target.run_once("done", op, "other")["error"] == "idempotency_conflict"
        assert target.run_once("hung", op, "fp")["error"] in ("in_progress", "outcome_unknown")
        assert op.calls == 0
        assert [r["approval_id"] for r in target.list_approvals()] == ["a1", "a2"]
        assert [r["approval_id"] for r in target.list_approvals("pending")] == ["a2"]
        assert keys_of(target) == {"done": "completed", "hung": "claimed", "theirs": "completed"}
        assert target.key_entry("done").updated_at == pytest.approx(
            source.key_entry("done").updated_at, abs=1e-3)
    finally:
        other.close()


@pytest.mark.parametrize("target_kind", ["memory", "sqlite", "postgres"])
def test_copy_moves_the_audit_log_as_one_chain_that_still_verifies(
    backend: Backend, target_kind: str, tmp_path: Path
) -> None:
    """The audit log goes with the keys, each entry as it is (signed ones too): the target's
    log verifies with the same public key; a copy made again adds only what came after."""
    pytest.importorskip("cryptography")
    private, public = new_signing_key()
    (tmp_path / "key.pem").write_bytes(private)
    (tmp_path / "key.pub").write_bytes(public)
    source = backend(TINY_TTL)
    signer = source.audit_signer = load_signer(tmp_path / "key.pem")
    for n in range(3):
        source.append_audit({"action": "note", "who": "ops", "n": n})
    other = Backend(target_kind, tmp_path / "target")
    try:
        target = other(TINY_TTL)
        copied = copy_store(source, target)
        assert (copied.audit, copied.audit_present) == (3, 0)
        assert list(target.audit_entries()) == list(source.audit_entries())
        assert verify_lines(export_lines(target.audit_entries(), 1.0e9, signer),
                            load_public_key(tmp_path / "key.pub")) == 3
        source.append_audit({"action": "note", "who": "ops", "n": 3})
        again = copy_store(source, target)
        assert (again.audit, again.audit_present) == (1, 3)
        assert [json.loads(e)["n"] for e in target.audit_entries()] == [0, 1, 2, 3]
        assert (copy_store(source, target).audit, copy_store(source, target).audit_present) == (
            0, 4)
    finally:
        other.close()


def test_a_target_with_an_audit_log_of_its_own_is_refused_before_anything_is_written(
    backend: Backend, tmp_path: Path
) -> None:
    """Two logs cannot be made one chain: the copy is refused, and the target keeps exactly
    what it held (no key, no approval, no entry of the source's)."""
    source = backend(TINY_TTL)
    assert source.run_once("done", Op(OK), "fp") == OK
    source.append_audit({"action": "note", "who": "ops", "where": "source"})
    target = Backend("sqlite", tmp_path / "target")(TINY_TTL)
    try:
        target.append_audit({"action": "note", "who": "ops", "where": "target"})
        with pytest.raises(operations.CopyRefused, match="audit log has 1 entry of its own"):
            copy_store(source, target)
        assert target.key_entry("done") is None and target.approval_page() == []
        assert [json.loads(e)["where"] for e in target.audit_entries()] == ["target"]
        # a log that is longer than the source's is the target's own too
        source_only = Backend("sqlite", tmp_path / "third")(TINY_TTL)
        with pytest.raises(operations.CopyRefused, match="of its own"):
            copy_store(source_only, target)
        source_only.close()
    finally:
        target.close()


def test_audit_entries_that_do_not_follow_on_are_not_appended(backend: Backend,
                                                               tmp_path: Path) -> None:
    """``add_audit`` checks the whole batch against the log's last entry before it writes:
    a gap, a wrong number or a broken link appends nothing."""
    other = Backend("sqlite", tmp_path / "donor")
    donor, store = other(), backend()
    for n in range(3):
        donor.append_audit({"action": "note", "who": "ops", "n": n})
    entries = donor.audit_page(0, 10)
    for bad in ([entries[1]], [entries[0], entries[2]], [(1, entries[1][1])]):
        with pytest.raises(operations.CopyRefused, match="does not follow"):
            store.add_audit(bad)
        assert list(store.audit_entries()) == []
    assert store.add_audit(entries) == 3 and store.add_audit([]) == 0
    assert verify_lines(export_lines(store.audit_entries(), 1.0e9, None)) == 3
    other.close()


def test_an_entry_is_a_result_or_a_claim(backend: Backend) -> None:
    with pytest.raises(ValueError, match="a result or a claim"):
        backend().add_keys([KeyEntry("k", None, None, None, None)])


def test_approval_entries_keep_creation_order_when_copied(backend: Backend) -> None:
    store = backend()
    entries = [ApprovalEntry(f"z{i}", "settled", f'{{"n":{i},"state":"settled"}}', 1.0 + i)
               for i in range(5)][::-1]
    assert store.add_approvals(entries) == 5
    assert [a.approval_id for a in store.approval_page()] == ["z4", "z3", "z2", "z1", "z0"]


# --------------------------------------------------------------------------- O(log n) claims


CLAIM_PATH = [  # what a claim costs, whatever the purge does around it
    ("new key", lambda store, op: store.run_once("new", op, "fp")),
    ("replay", lambda store, op: store.run_once("new", op, "fp")),
    ("conflict", lambda store, op: store.run_once("new", op, "other")),
    ("claimed key", lambda store, op: store.run_once("hung", op, "fp")),
]


def test_sqlite_every_claim_statement_finds_its_row_by_the_primary_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The query plan of every statement a claim sends, on 20,000 keys: a b-tree search of
    the primary key (O(log n)), never a scan; the purge's steps are bounded ranges of it."""
    sent: list[str] = []
    connect = SQLiteIdempotencyStore._connect

    def tracer(_cursor: apsw.Cursor, sql: str, _bindings: Any) -> bool:
        sent.append(sql)
        return True

    def traced(self: SQLiteIdempotencyStore, **kwargs: Any) -> apsw.Connection:
        conn = connect(self, **kwargs)
        conn.set_exec_trace(tracer)
        return conn

    monkeypatch.setattr(SQLiteIdempotencyStore, "_connect", traced)
    store = SQLiteIdempotencyStore(tmp_path / "s.sqlite3", retention_seconds=RETENTION)
    try:
        now = store.store_now()
        store.add_keys([KeyEntry(f"k{i:06d}", "fp", '{"ok":true}', None, now - 2 * RETENTION)
                        for i in range(20_000)])
        store.run_once("hung", lambda: dict(UNKNOWN), "fp")
        plans = {}
        for name, call in CLAIM_PATH:
            sent.clear()
            call(store, Op(OK))
            plans[name] = explain_sqlite(tmp_path / "s.sqlite3", sent)
        sent.clear()
        assert store.purge() == 20_000
        purge_plans = explain_sqlite(tmp_path / "s.sqlite3", sent)
    finally:
        store.close()
    for name, found in plans.items():
        assert found, name
        for statement, details in found:
            assert details and all("USING PRIMARY KEY (key=?)" in d for d in details), (
                name, statement, details)
    window = [d for _, details in purge_plans for d in details]
    assert "SEARCH keys USING PRIMARY KEY (key>?)" in window
    assert "SEARCH keys USING PRIMARY KEY (key>? AND key<?)" in window
    # one scan in all: the first window's, from the first key and bounded by its LIMIT
    assert [d for d in window if d.startswith("SCAN keys")] == ["SCAN keys"], window


def explain_sqlite(path: Path, statements: list[str]) -> list[tuple[str, list[str]]]:
    """(statement, its query plan's lines) for each statement on the keys table, planned by
    the store's own SQLite (apsw's) while the store has the file open."""
    conn = apsw.Connection(str(path))
    try:
        found = []
        for statement in statements:
            # (an INSERT's plan is empty: its uniqueness check is the primary key's b-tree)
            if " keys" not in statement or not statement.lstrip().upper().startswith(
                    ("SELECT", "UPDATE", "DELETE")):
                continue
            rows = conn.execute(f"EXPLAIN QUERY PLAN {statement}",
                                [None] * statement.count("?")).fetchall()
            found.append((statement, [str(row[-1]) for row in rows]))
        return found
    finally:
        conn.close()


def test_pg_every_claim_statement_finds_its_row_by_the_primary_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL's plans for the same statements, on 20,000 analysed keys: index scans of
    ``agentkit_keys_pkey``, never a sequential scan of the keys."""
    import psycopg

    backend = Backend("postgres", tmp_path)
    try:
        store = backend(retention_seconds=RETENTION)
        now = store.store_now()
        store.add_keys([KeyEntry(f"k{i:06d}", "fp", '{"ok":true}', None, now - 2 * RETENTION)
                        for i in range(20_000)])
        store.run_once("hung", lambda: dict(UNKNOWN), "fp")
        assert backend.pg is not None
        backend.pg.execute("ANALYZE agentkit_keys")
        sent: list[tuple[str, Any]] = []
        execute = psycopg.Connection.execute

        def traced(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
            sent.append((str(query), params))
            return execute(self, query, params, **kwargs)

        monkeypatch.setattr(psycopg.Connection, "execute", traced)
        for name, call in CLAIM_PATH:
            sent.clear()
            call(store, Op(OK))
            plans = explain_pg(backend, sent)
            assert plans, name
            for statement, plan in plans:
                assert "agentkit_keys_pkey" in plan and "Seq Scan" not in plan, (name, statement, plan)
        sent.clear()
        store.purge()
        for statement, plan in explain_pg(backend, sent):
            assert "Seq Scan" not in plan, (statement, plan)
    finally:
        backend.close()


def explain_pg(backend: Backend, sent: list[tuple[str, Any]]) -> list[tuple[str, str]]:
    assert backend.pg is not None
    found = []
    for statement, params in list(sent):  # (the EXPLAINs below are traced too)
        if "agentkit_keys" not in statement or statement.startswith(("EXPLAIN", "SELECT pg_advisory")):
            continue
        rows = backend.pg.execute(f"EXPLAIN {statement}", tuple(params or ()))
        found.append((statement, "\n".join(str(row[0]) for row in rows)))
    return found


# --------------------------------------------------------------------------- the previous release

PREVIOUS_RELEASE = "bf50fa0439f8ca7643270050442ecfdb73fc97b9"  # the last commit before retention


def test_a_store_of_the_previous_release_is_listed_purged_and_copied(tmp_path: Path) -> None:
    """No schema change: the previous release's file (schema version 2) is used in place."""
    previous = release("sqlite", PREVIOUS_RELEASE)
    path = tmp_path / "old.sqlite3"
    with previous.SQLiteIdempotencyStore(path) as old:
        old.run_once("done", lambda: dict(OK), "fp")
        old.create_approval("a1", {"state": "settled"})
    with SQLiteIdempotencyStore(path, retention_seconds=RETENTION) as store:
        assert keys_of(store) == {"done": "completed"}
        assert store.purge(now=time.time() + 2 * RETENTION) == 2
        assert keys_of(store) == {} and store.approval_page() == []
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone() == (3,)  # release 3: the audit log
    finally:
        conn.close()
