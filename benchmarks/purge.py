"""A purge of many keys beside a worker that keeps claiming (run by benchmarks/run.py).

    python benchmarks/purge.py URL [--keys N]       URL: sqlite:///PATH or postgresql://…

Fills the store named by ``URL`` with ``N`` completed keys eight days old (the size of the
practitioner's ``create_ticket`` keys: a 64-hex key, its fingerprint, a small result), and
measures the bytes each key takes. Then a worker in this process makes one new-key
``run_once`` (claim and completion) every millisecond while another process purges
(``store.purge()``: 7 days' retention, so every filled key goes), and then as long again with
no purge (the machine's own noise, in the same run). Prints one JSON object: the purge's rate,
its longest step, the worst and 99.9th percentile ``run_once`` of both phases, and
(PostgreSQL) how many checkpoints fell in each (the fill's own are made before anything is
timed), the log the server wrote during the purge and the most one step wrote.
docs/design.md#operating-the-stores: a purge holds no claim waiting more than 50 ms.

A PostgreSQL URL gets a schema of its own for the run (dropped afterwards).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
DAY = 86_400.0
RESULT = json.dumps({"data": json.dumps({"ticket": "T-100000", "title": "Printer on floor 3"}),
                     "ok": True}, separators=(",", ":"))
TICK = 0.001  # one worker call per millisecond
BASELINE_SECONDS = 3.0  # the least the phase without a purge lasts


def filled(store: Any, keys: int) -> float:
    """Insert ``keys`` completed keys eight days old; returns the seconds it took."""
    from agentkit.policy.stores import KeyEntry

    old = store.store_now() - 8 * DAY
    digests = sorted(hashlib.sha256(str(i).encode()).hexdigest() for i in range(keys))
    started = time.perf_counter()  # (in key order: a b-tree filled from one end)
    for first in range(0, keys, 10_000):
        store.add_keys([KeyEntry(f"default:create_ticket:{digest}", digest[::-1], RESULT, None, old)
                        for digest in digests[first:first + 10_000]])
    return time.perf_counter() - started


def bytes_per_key(url: str, store: Any, keys: int) -> float:
    if url.startswith("sqlite:"):
        import apsw  # the store's own SQLite (a second SQLite library must not share the file)

        conn = apsw.Connection(store.path)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            pages, size = (conn.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "page_size"))
        finally:
            conn.close()
        return float(pages * size) / keys
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE agentkit_keys")
        row = conn.execute("SELECT pg_total_relation_size('agentkit_keys')").fetchone()
        # The fill's log and dirty pages go to disk now, as SQLite's checkpoint above does,
        # so that no timed phase pays for the fill (a server user without the right: skipped).
        with contextlib.suppress(psycopg.errors.InsufficientPrivilege):
            conn.execute("CHECKPOINT")
    assert row is not None
    return float(row[0]) / keys


def checkpoints(url: str) -> int | None:
    """How many checkpoints the PostgreSQL server has made (None for SQLite): a checkpoint
    that falls in a timed phase flushes the data files, and every commit waits behind it."""
    if not url.startswith("postgres"):
        return None
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        for query in ("SELECT num_timed + num_requested FROM pg_stat_checkpointer",  # 17+
                      "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter"):
            try:
                row = conn.execute(query).fetchone()
            except psycopg.Error:
                continue
            return None if row is None else int(row[0])
    return None


def worker(store: Any, prefix: str, until: Any) -> list[float]:
    """One new-key run_once per tick until ``until()``; the latency of each, in seconds."""
    latencies = []
    number = 0
    next_tick = time.perf_counter()
    while not until():
        number += 1
        began = time.perf_counter()
        result = store.run_once(f"{prefix}-{number}", lambda: {"ok": True, "data": "x"}, "fp")
        latencies.append(time.perf_counter() - began)
        assert result.get("ok"), result
        next_tick += TICK
        pause = next_tick - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        else:
            next_tick = time.perf_counter()
    return latencies


def summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {"calls": len(ordered), "worst_ms": ordered[-1] * 1e3,
            "p999_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.999))] * 1e3,
            "median_ms": ordered[len(ordered) // 2] * 1e3}


def log_position(url: str) -> int | None:
    """Where PostgreSQL's write-ahead log ends, in bytes (None for SQLite)."""
    if not url.startswith("postgres"):
        return None
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()
    return None if row is None else int(row[0])


def purge_child(url: str) -> int:
    """The purging process: ``store.purge()``, timed."""
    from agentkit import open_store

    with open_store(url) as store:
        # Each step of the purge timed (a window's read and its DELETE, the write lock held
        # on SQLite): the longest is the most a claim can wait behind the purge itself.
        window = store._purge_window  # (the bench measures a store's step from outside)
        steps: list[float] = []
        logged: list[int] = []  # the log each step wrote, where the store measures it

        def timed(*args: Any) -> Any:
            began = time.perf_counter()
            try:
                done = window(*args)
            finally:
                steps.append(time.perf_counter() - began)
            if done[2]:  # (None where the store does not measure its log)
                logged.append(done[2])
            return done

        store._purge_window = timed
        first = log_position(url)
        started = time.perf_counter()
        purged = store.purge()
        seconds = time.perf_counter() - started
        last = log_position(url)
    timed_steps = summary(steps) if steps else {"calls": 0, "worst_ms": 0.0, "p999_ms": 0.0}
    print(json.dumps({"purged": purged, "seconds": seconds, "steps": timed_steps["calls"],
                      "longest_step_ms": timed_steps["worst_ms"],
                      "p999_step_ms": timed_steps["p999_ms"],
                      # the server's log during the purge (the worker's claims' too)
                      "log_bytes": None if first is None or last is None else last - first,
                      "largest_step_log_bytes": max(logged) if logged else None}))
    return 0


def measure(url: str, keys: int) -> dict[str, Any]:
    from agentkit import open_store

    with open_store(url) as store:
        fill_seconds = filled(store, keys)
        size = bytes_per_key(url, store, keys)
        made = [checkpoints(url)]
        started = time.perf_counter()
        child = subprocess.Popen([sys.executable, __file__, url, "--purge-child"], cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        during = worker(store, "during", lambda: child.poll() is not None)
        made.append(checkpoints(url))
        length = max(BASELINE_SECONDS, time.perf_counter() - started)
        started = time.perf_counter()
        alone = worker(store, "alone", lambda: time.perf_counter() - started > length)
        made.append(checkpoints(url))
        out, err = child.communicate()
        if child.returncode != 0:
            raise RuntimeError(f"the purge failed: {err.strip().splitlines()[-1:]}")
        purge = json.loads(out.strip().splitlines()[-1])
        left = sum(1 for entry in store.entries() if entry.key.startswith("default:"))
    first, mid, last = made
    return {
        "keys": keys, "bytes_per_key": size, "fill_seconds": fill_seconds,
        "purged": purge["purged"], "purge_seconds": purge["seconds"], "left": left,
        "purge_keys_per_second": purge["purged"] / purge["seconds"],
        "steps": purge["steps"], "longest_step_ms": purge["longest_step_ms"],
        "p999_step_ms": purge["p999_step_ms"], "log_bytes": purge["log_bytes"],
        "largest_step_log_bytes": purge["largest_step_log_bytes"],
        "alone": summary(alone), "during": summary(during),
        "checkpoints": None if first is None or mid is None or last is None else {
            "during": mid - first, "alone": last - mid},  # PostgreSQL: in each timed phase
    }


def postgres_schema(url: str) -> tuple[str, Any]:
    """The URL with a fresh schema as its search_path, and a function that drops it."""
    import psycopg

    name = f"agentkit_bench_purge_{os.getpid()}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")

    def drop() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {name} CASCADE")

    joiner = "&" if "?" in url else "?"
    return f"{url}{joiner}options={quote(f'-c search_path={name}')}", drop


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--purge-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.purge_child:
        return purge_child(args.url)
    url, drop = (postgres_schema(args.url) if args.url.startswith("postgres")
                 else (args.url, lambda: None))
    try:
        print(json.dumps(measure(url, args.keys)))
    finally:
        drop()
    return 0


if __name__ == "__main__":
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    sys.exit(main())
