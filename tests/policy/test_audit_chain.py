"""The audit log (docs/design.md#approvals-desk): every decision, release and purge appends a
hash-chained entry in the same transaction as the change it records, on every store; an
export verifies offline, and a changed, removed, added or moved entry fails with its number;
signed entries need only the public key, and a chain recomputed by whoever edited the store
fails at the first entry it changed."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from test_stores import Backend  # tests/ is on sys.path

from agentkit import ToolRegistry, ToolRunner, ToolSpec
from agentkit.policy.stores import IdempotencyStore, SQLiteIdempotencyStore, StoreError
from agentkit.policy.stores.audit import (
    GENESIS,
    Broken,
    arguments_digest,
    entry_hash,
    export_lines,
    load_public_key,
    load_signer,
    new_signing_key,
    verify_lines,
)

WAIT = 30


def payments(paid: list[dict[str, Any]]) -> ToolRegistry:
    """One irreversible tool whose every real run is counted in ``paid``."""

    def pay(to: str, cents: int) -> str:
        paid.append({"to": to, "cents": cents})
        return f"paid {cents} to {to}"

    registry = ToolRegistry()
    registry.register(ToolSpec("pay", "Pay an invoice", "irreversible_write", 5, 1, 200, pay))
    return registry


def entries(store: Any) -> list[dict[str, Any]]:
    return [json.loads(text) for text in store.audit_entries()]


def exported(store: Any, signer: Any = None) -> list[str]:
    return list(export_lines(store.audit_entries(), 1.0e9, signer))


# ---------------------------------------------------------------- every store appends


def test_decisions_releases_and_purges_append_a_chain_on_every_store(backend: Backend) -> None:
    paid: list[dict[str, Any]] = []
    store = backend(retention_seconds=60)
    model = ToolRunner(payments(paid), store=store)
    desk = ToolRunner(payments(paid), store=store if backend.kind == "memory" else backend())
    first = model.call("pay", {"to": "ana", "cents": 5})["approval_id"]
    second = model.call("pay", {"to": "bob", "cents": 7})["approval_id"]
    assert desk.approve(first, approver="alice")["ok"] is True
    assert desk.deny(second, approver="bert")["error"] == "forbidden"
    assert desk.approve(first, approver="carol")["replayed"] is True  # nothing new: no entry
    found = entries(store)
    assert [(e["seq"], e["action"], e["who"], e["approval_id"]) for e in found] == [
        (1, "approve", "alice", first), (2, "deny", "bert", second)]
    assert found[0]["tool"] == "pay" and found[0]["key"].endswith(
        arguments_digest({"to": "ana", "cents": 5}))
    assert found[0]["arguments_digest"] == arguments_digest({"cents": 5, "to": "ana"})
    assert found[0]["prev"] == GENESIS and found[1]["prev"] == found[0]["hash"]
    assert verify_lines(exported(store)) == 2
    assert paid == [{"to": "ana", "cents": 5}]
    assert desk.approvals.get(first)["decided_by"] == "alice"


def test_a_release_and_a_purge_are_entries_too(backend: Backend) -> None:
    store = backend(claim_ttl_seconds=1, retention_seconds=60)
    assert store.run_once("done", lambda: {"ok": True, "data": "x"})["ok"]
    claimed = store.claim("stuck", None, 1, may_take_over=True)
    assert isinstance(claimed, tuple)
    backend.advance(5)
    released = store.release_stale("stuck", who="ops", note="checked the bank: not paid")
    assert released.outcome == "released"
    assert store.release_stale("stuck", who="ops").outcome == "unknown"  # nothing: no entry
    assert store.purge(now=store.store_now() + 3600) == 1
    found = entries(store)
    assert [(e["action"], e["who"]) for e in found] == [("release", "ops"), ("purge", None)]
    assert found[0]["note"] == "checked the bank: not paid" and found[0]["key"] == "stuck"
    assert found[1]["keys"] == 1
    assert store.purge(now=store.store_now() + 3600) == 0  # nothing deleted: no entry
    assert verify_lines(exported(store)) == 2


def test_a_second_sign_off_racing_another_cannot_lose_it(sql_backend: Backend) -> None:
    """Whole-record compare-and-swap: threads appending decisions at once leave one
    contiguous chain (no number twice, none missing) and every decision kept."""
    paid: list[dict[str, Any]] = []
    store = sql_backend()
    model = ToolRunner(payments(paid), store=store)
    ids = [model.call("pay", {"to": f"p{n}", "cents": n})["approval_id"] for n in range(8)]
    start = threading.Barrier(8, timeout=WAIT)
    results: list[dict[str, Any]] = []

    def decide(n: int) -> None:
        runner = ToolRunner(payments(paid), store=sql_backend())
        start.wait()
        act = runner.approve if n % 2 else runner.deny
        results.append(act(ids[n], approver=f"person{n}"))

    threads = [threading.Thread(target=decide, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert len(results) == 8 and len(paid) == 4
    found = entries(store)
    assert [e["seq"] for e in found] == list(range(1, 9))
    assert sorted(e["who"] for e in found) == [f"person{n}" for n in range(8)]
    assert verify_lines(exported(store)) == 8


def test_an_entry_that_cannot_be_signed_keeps_nothing_and_pays_nothing(backend: Backend) -> None:
    class Failing:
        key_id = "ed25519:broken"

        def sign(self, data: bytes) -> bytes:
            raise RuntimeError("the HSM is unplugged")

    paid: list[dict[str, Any]] = []
    store = backend()
    runner = ToolRunner(payments(paid), store=store)
    approval_id = runner.call("pay", {"to": "ana", "cents": 5})["approval_id"]
    store.audit_signer = Failing()
    assert runner.approve(approval_id, approver="alice")["error"] == "busy"
    assert runner.approvals.get(approval_id)["state"] == "pending"
    assert paid == [] and entries(store) == []
    with pytest.raises(StoreError, match="cannot be signed"):
        store.append_audit({"action": "note"})
    store.audit_signer = None
    assert runner.approve(approval_id, approver="alice")["ok"] is True
    assert len(paid) == 1 and [e["seq"] for e in entries(store)] == [1]


# ---------------------------------------------------------------- verify: tamperings


def _chain(n: int = 5, signer: Any = None) -> list[str]:
    store = IdempotencyStore()
    store.audit_signer = signer
    for i in range(n):
        store.append_audit({"action": "approve", "who": f"p{i}", "tool": "pay", "key": f"k{i}"})
    return exported(store, signer)


def _edit(line: str, **changes: Any) -> str:
    entry = json.loads(line)
    entry.update(changes)
    return json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _rehash(lines: list[str], start: int) -> list[str]:
    """What a forger without the key does: recompute every hash and link from ``start`` on
    (lines are 0-based; the closing line recomputed too)."""
    out = lines[:start]
    prev = json.loads(out[-1])["hash"] if out else GENESIS
    count = len(out)
    for line in lines[start:]:
        entry = json.loads(line)
        if entry.get("end"):
            entry.update(entries=count, head=prev)
            entry.pop("signature", None)
            entry["hash"] = entry_hash(entry)
        else:
            count += 1
            entry.update(seq=count, prev=prev)
            entry["hash"] = entry_hash(entry)
            prev = entry["hash"]
        out.append(json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=False))
    return out


TAMPERINGS = [
    ("a changed field", lambda ls: [*ls[:2], _edit(ls[2], who="mallory"), *ls[3:]], 3),
    ("a changed tool", lambda ls: [*ls[:1], _edit(ls[1], tool="refund"), *ls[2:]], 2),
    ("a changed time", lambda ls: [_edit(ls[0], at=0.0), *ls[1:]], 1),
    ("a changed hash", lambda ls: [*ls[:3], _edit(ls[3], hash="0" * 64), *ls[4:]], 4),
    ("a removed middle entry", lambda ls: [*ls[:2], *ls[3:]], 3),
    ("a removed first entry", lambda ls: ls[1:], 1),
    ("a removed last entry", lambda ls: [*ls[:4], ls[5]], 5),
    ("a removed closing line", lambda ls: ls[:5], 6),
    ("two entries swapped", lambda ls: [ls[0], ls[2], ls[1], *ls[3:]], 2),
    ("the last two swapped", lambda ls: [*ls[:3], ls[4], ls[3], ls[5]], 4),
    ("an entry twice", lambda ls: [*ls[:3], ls[2], *ls[3:]], 4),
    ("an entry added after the end", lambda ls: [*ls, ls[0]], 7),
    ("a forged entry inserted", lambda ls: [*ls[:2], _edit(ls[1], seq=3), *ls[2:]], 3),
    ("a line that is not JSON", lambda ls: [*ls[:1], ls[1][:-5], *ls[2:]], 2),
    ("a line that is not an object", lambda ls: [*ls[:1], "[1, 2]", *ls[2:]], 2),
    ("an empty line", lambda ls: [*ls[:2], "", *ls[2:]], 3),
    ("the closing count changed", lambda ls: [*ls[:5], _edit(ls[5], entries=4)], 6),
    ("the closing line changed", lambda ls: [*ls[:5], _edit(ls[5], exported_at=2.0)], 6),
    ("an empty file", lambda ls: [], 1),
    ("a renumbered entry", lambda ls: [*ls[:1], _edit(ls[1], seq=7), *ls[2:]], 2),
]


@pytest.mark.parametrize(("what", "tamper", "number"), TAMPERINGS, ids=[t[0] for t in TAMPERINGS])
def test_every_tampering_fails_with_the_entrys_number(what: str, tamper: Any, number: int) -> None:
    lines = _chain(5)
    assert verify_lines(lines) == 5
    found = verify_lines(tamper(lines))
    assert isinstance(found, Broken), what
    assert found.entry == number, f"{what}: {found}"
    assert str(found).startswith(f"entry {number}: ")


def test_an_empty_log_exports_and_verifies() -> None:
    lines = exported(IdempotencyStore())
    assert len(lines) == 1 and verify_lines(lines) == 0


# ---------------------------------------------------------------- signatures


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("keys")
    made = {}
    for name in ("ours", "theirs"):
        private, public = new_signing_key()
        (folder / f"{name}.pem").write_bytes(private)
        (folder / f"{name}.pub").write_bytes(public)
        made[name] = folder / f"{name}.pem"
        made[f"{name}.pub"] = folder / f"{name}.pub"
    return made


def test_signed_entries_verify_with_the_public_key_alone(keys: dict[str, Path]) -> None:
    signer = load_signer(keys["ours"])
    lines = _chain(4, signer)
    assert all(json.loads(line)["signed_by"] == signer.key_id for line in lines)
    assert verify_lines(lines, load_public_key(keys["ours.pub"])) == 4
    assert verify_lines(lines, load_public_key(keys["ours"])) == 4  # the private PEM's half
    assert verify_lines(lines) == 4  # the chain alone holds too


def test_a_chain_recomputed_by_a_forger_passes_alone_but_fails_its_signatures(
        keys: dict[str, Path]) -> None:
    lines = _chain(5, load_signer(keys["ours"]))
    forged = _rehash([*lines[:2], _edit(lines[2], who="mallory"), *lines[3:]], 2)
    assert verify_lines(forged) == 5  # without the key a recomputed chain cannot be told
    found = verify_lines(forged, load_public_key(keys["ours.pub"]))
    assert isinstance(found, Broken) and found.entry == 3 and "signature" in found.reason
    cut = _rehash([*lines[:4], lines[5]], 4)  # the last entry removed, the end recomputed
    found = verify_lines(cut, load_public_key(keys["ours.pub"]))
    assert isinstance(found, Broken) and found.entry == 5 and "not signed" in found.reason


def test_unsigned_or_otherwise_signed_entries_fail_with_a_public_key(keys: dict[str, Path]) -> None:
    ours = load_public_key(keys["ours.pub"])
    found = verify_lines(_chain(3), ours)
    assert isinstance(found, Broken) and found.entry == 1 and "not signed" in found.reason
    found = verify_lines(_chain(3, load_signer(keys["theirs"])), ours)
    assert isinstance(found, Broken) and found.entry == 1 and "another key" in found.reason
    lines = _chain(3, load_signer(keys["ours"]))
    stripped = json.loads(lines[1])
    del stripped["signature"]
    found = verify_lines([lines[0], json.dumps(stripped), *lines[2:]], ours)
    assert isinstance(found, Broken) and found.entry == 2
    bad = _edit(lines[2], signature=json.loads(lines[0])["signature"])
    found = verify_lines([*lines[:2], bad, lines[3]], ours)
    assert isinstance(found, Broken) and found.entry == 3 and "does not match" in found.reason


def test_the_signing_key_from_the_environment_signs_every_store(
        backend: Backend, keys: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTKIT_AUDIT_SIGNING_KEY", str(keys["ours"]))
    paid: list[dict[str, Any]] = []
    store = backend()
    runner = ToolRunner(payments(paid), store=store)
    approval_id = runner.call("pay", {"to": "ana", "cents": 5})["approval_id"]
    assert runner.approve(approval_id, approver="alice")["ok"] is True
    lines = exported(store, load_signer(keys["ours"]))  # the export's closing line: signed too
    assert verify_lines(lines, load_public_key(keys["ours.pub"])) == 1
    monkeypatch.setenv("AGENTKIT_AUDIT_SIGNING_KEY", str(keys["ours"]) + ".missing")
    other = runner.call("pay", {"to": "bob", "cents": 6})["approval_id"]
    assert runner.approve(other, approver="alice")["error"] == "busy"  # no key: no decision
    assert runner.approvals.get(other)["state"] == "pending" and len(paid) == 1


def test_keys_that_cannot_be_used_are_one_line_errors(tmp_path: Path, keys: dict[str, Path]) -> None:
    (tmp_path / "junk.pem").write_text("not a key")
    with pytest.raises(ValueError, match="junk.pem: not an unencrypted PEM private key"):
        load_signer(tmp_path / "junk.pem")
    with pytest.raises(ValueError, match="missing.pem: cannot read the signing key"):
        load_signer(tmp_path / "missing.pem")
    with pytest.raises(ValueError, match="not a PEM public key"):
        load_public_key(tmp_path / "junk.pem")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    other = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())
    (tmp_path / "ec.pem").write_bytes(other)
    with pytest.raises(ValueError, match="not an Ed25519 key"):
        load_signer(tmp_path / "ec.pem")


# ---------------------------------------------------------------- the schema


def test_a_sqlite_store_of_release_2_gains_the_audit_log(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    SQLiteIdempotencyStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE audit")
    conn.execute("PRAGMA user_version = 2")
    conn.commit()
    conn.close()
    with SQLiteIdempotencyStore(path) as store:
        store.append_audit({"action": "approve", "who": "alice"})
        assert verify_lines(exported(store)) == 1
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone() == (3,)
    finally:
        conn.close()


def test_a_postgres_store_of_release_2_gains_the_audit_log(tmp_path: Path) -> None:
    backend = Backend("postgres", tmp_path)
    try:
        backend().key_page(None, 1)  # the tables made at version 3
        backend.sql("DROP TABLE agentkit_audit")
        backend.sql("DELETE FROM agentkit_schema")
        backend.sql("INSERT INTO agentkit_schema (version) VALUES (2)")
        store = backend()
        store.append_audit({"action": "approve", "who": "alice"})
        assert verify_lines(exported(store)) == 1
        assert backend.sql("SELECT version FROM agentkit_schema ORDER BY version") == [(2,), (3,)]
    finally:
        backend.close()
