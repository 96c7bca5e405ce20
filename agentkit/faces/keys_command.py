"""``python -m agentkit keys list|show KEY|release KEY|purge|copy --to URL``: what a store
holds, for an operator (docs/design.md#command-line).

The command line (:mod:`agentkit.faces.cli`) opens the stores and turns every failure to
open or use one into one line on stderr; this module does the work on open stores and prints
it: plain text for people, or one JSON document (``--json``) for scripts. Keys and results
are shown with every invisible or reordering character escaped, as the approvals are.

``release`` clears one stuck claim only if a runner would take it over (stale: its lease
passed, its owner gone, or marked stale after ``outcome_unknown``); ``copy`` refuses, with
exit status 2, a copy that could let a write run twice (open claims in the source, a source
that changed during the copy) or a copy of a store onto itself.
"""

from __future__ import annotations

import itertools
import json
from datetime import datetime, timezone
from typing import IO, Any

from agentkit.boundary.canonical import escape_invisible
from agentkit.policy.stores.operations import CopyRefused, KeyEntry, OperableStore, copy_store

__all__ = ["copy_keys", "list_keys", "purge_keys", "release_key", "retention_text", "show_key"]


def list_keys(store: OperableStore, *, limit: int | None, as_json: bool, out: IO[str]) -> int:
    """Every key in key order (the first ``limit`` when given), page by page; returns 0."""
    now = store.store_now()
    shown = completed = claimed = stale = 0
    more = False
    entries = store.entries()
    first = next(entries, None)  # a store that cannot be read fails before anything is written
    if as_json:
        out.write("[")
    for entry in itertools.chain([] if first is None else [first], entries):
        if limit is not None and shown == limit:
            more = True
            break
        facts = _facts(store, entry, now)
        if as_json:
            out.write(("," if shown else "") + "\n  " + _json(facts))
        else:
            out.write(_line(facts) + "\n")
        shown += 1
        completed += entry.result is not None
        claimed += entry.result is None
        stale += bool(facts.get("stale"))
    if as_json:
        out.write("\n]\n" if shown else "]\n")
        return 0
    if not shown:
        out.write("no keys\n")
        return 0
    summary = f"{shown} key{'s' if shown != 1 else ''}: {completed} completed, {claimed} claimed"
    if stale:
        summary += (f" ({stale} stale: a status lookup, or `keys release KEY` once you"
                    " checked, settles them)")
    if more:
        summary += f"; more not shown (--limit {limit})"
    out.write(summary + "\n")
    return 0


def show_key(store: OperableStore, key: str, *, as_json: bool, out: IO[str], err: IO[str]) -> int:
    """One key, whole: 0, or 1 (a line on ``err``) when the store does not hold it."""
    entry = store.key_entry(key)
    if entry is None:
        err.write(f"agentkit keys show: no key {escape_invisible(key)!r} in the store\n")
        return 1
    facts = _facts(store, entry, store.store_now())
    if entry.result is not None:
        facts["result"] = json.loads(entry.result)
    if as_json:
        out.write(_json(facts) + "\n")
        return 0
    rows: list[tuple[str, Any]] = [
        ("key", escape_invisible(entry.key)),
        ("state", facts["state"] + (" (stale: its lease passed or its owner is gone)"
                                    if facts.get("stale") else "")),
        ("updated at", _when(entry.updated_at)),
        ("fingerprint", facts["fingerprint"] or "-"),
    ]
    if entry.claim is not None:
        rows += [("owner", f"host {escape_invisible(entry.claim.host)}, pid {entry.claim.pid}"),
                 ("lease until", _when(entry.claim.lease_until))]
    else:
        rows.append(("result", escape_invisible(json.dumps(facts["result"], ensure_ascii=False))))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        out.write(f"{name.ljust(width)}  {value}\n")
    return 0


def release_key(store: OperableStore, key: str, *, as_json: bool, out: IO[str],
                err: IO[str], who: str | None = None, note: str | None = None) -> int:
    """Clear ``key``'s stale claim: 0 and one line on ``out``; 2 and one line on ``err``
    (nothing changed) for a completed key, a key the store does not hold, or a live claim.
    A release is appended to the store's audit log with ``who`` and ``note``."""
    done = store.release_stale(key, who=who, note=note)
    shown = repr(escape_invisible(key))
    claim = done.claim
    owner = "" if claim is None else (
        f"owner host {escape_invisible(claim.host)}, pid {claim.pid}; lease until"
        f" {_when(claim.lease_until)}")
    if done.outcome == "released":
        assert claim is not None
        if as_json:
            out.write(_json({"key": key, "released": True, "host": claim.host, "pid": claim.pid,
                             "lease_until": claim.lease_until}) + "\n")
        else:
            out.write(f"released the stale claim on {shown} ({owner}): the next call asks its"
                      " status lookup, or runs it\n")
        return 0
    why = {
        "completed": "it is completed, not claimed: nothing to release",
        "unknown": "no such key in the store",
        "live": (f"its claim is live ({owner}; the owner may still be writing): release it"
                 " once it is stale, its lease passed or its owner gone"),
    }[done.outcome]
    err.write(f"agentkit keys release: {shown}: {why}\n")
    return 2


def purge_keys(store: OperableStore, *, as_json: bool, out: IO[str],
               who: str | None = None) -> int:
    """Purge what is past the store's retention (a purge that deleted something is appended
    to the store's audit log, with ``who``); returns 0."""
    purged = store.purge_counts(who=who)
    if as_json:
        out.write(_json({"keys": purged.keys, "approvals": purged.approvals,
                         "before": purged.before,
                         "retention_seconds": store.retention_seconds}) + "\n")
        return 0
    if purged.before is None:
        out.write("retention is off (kept forever): nothing purged\n")
        return 0
    out.write(f"purged {purged.keys} completed key{'s' if purged.keys != 1 else ''} and"
              f" {purged.approvals} approval{'s' if purged.approvals != 1 else ''} last changed"
              f" before {_when(purged.before)} (retention"
              f" {retention_text(store.retention_seconds)})\n")
    return 0


def copy_keys(source: OperableStore, target: OperableStore, *, source_name: str,
              target_name: str, as_json: bool, out: IO[str], err: IO[str]) -> int:
    """Copy what ``target`` does not hold yet: 0; or 2 and one line on ``err`` when the copy
    is refused (:class:`~agentkit.policy.stores.operations.CopyRefused`)."""
    try:
        copied = copy_store(source, target)
    except CopyRefused as exc:
        err.write(f"agentkit keys copy: {source_name}: {exc}\n")
        return 2
    if as_json:
        out.write(_json({"from": source_name, "to": target_name, "keys": copied.keys,
                         "keys_present": copied.keys_present, "approvals": copied.approvals,
                         "approvals_present": copied.approvals_present,
                         "audit": copied.audit, "audit_present": copied.audit_present}) + "\n")
        return 0
    out.write(f"copied {copied.keys} key{'s' if copied.keys != 1 else ''},"
              f" {copied.approvals} approval{'s' if copied.approvals != 1 else ''} and"
              f" {copied.audit} audit entr{'y' if copied.audit == 1 else 'ies'} from"
              f" {source_name} to {target_name}")
    if copied.keys_present or copied.approvals_present or copied.audit_present:
        out.write(f" ({copied.keys_present} keys, {copied.approvals_present} approvals and"
                  f" {copied.audit_present} audit entries were there already and were left"
                  " as they are)")
    out.write("\n")
    return 0


def retention_text(seconds: float | None) -> str:
    """``604800.0`` -> ``"7 days"``; None -> ``"forever"``."""
    if seconds is None:
        return "forever"
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds:g} s"


# ---- helpers


def _facts(store: OperableStore, entry: KeyEntry, now: float) -> dict[str, Any]:
    """What a listing says of one key (the JSON object of ``--json``)."""
    facts: dict[str, Any] = {"key": entry.key, "state": entry.state,
                             "updated_at": entry.updated_at, "fingerprint": entry.fingerprint}
    if entry.claim is not None:
        facts["lease_until"] = entry.claim.lease_until
        facts["stale"] = store.claim_is_stale(entry.claim, now)
    return facts


def _line(facts: dict[str, Any]) -> str:
    line = f"{facts['state']:<9}  {_when(facts['updated_at']):<20}  {escape_invisible(facts['key'])}"
    if "lease_until" in facts:
        line += f"  {'stale, ' if facts['stale'] else ''}lease until {_when(facts['lease_until'])}"
    return line


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    try:
        return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return f"{seconds:g}"


def _json(value: Any) -> str:
    return escape_invisible(json.dumps(value, ensure_ascii=False, sort_keys=True))
