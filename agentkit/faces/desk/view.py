"""What the desk shows: each waiting approval with the evidence to decide it, and the calls
in doubt, read from the store (plain data for the templates; nothing here decides).

Every text that came from a model or a store is shown through :func:`shown`: invisible and
reordering characters (bidi controls, zero-width characters) become their visible ``\\uXXXX``
escape, and the template engine escapes HTML, so a value is shown as the characters it holds
and never interpreted. Arguments are shown whole; a long value is folded under a preview
that expands (``<details>``: no script needed) to the whole text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentkit.boundary.canonical import escape_invisible, json_text
from agentkit.boundary.registry import ToolRegistry
from agentkit.faces.approvals_command import approved_by, when, workflow_text
from agentkit.policy.approvals import SETTLED, people_needed, settled_result
from agentkit.policy.stores.audit import arguments_digest
from agentkit.policy.stores.operations import KeyEntry, OperableStore

__all__ = ["DoubtView", "PendingView", "Snapshot", "arguments_text", "shown", "snapshot"]

#: Arguments longer than this (characters of their JSON text) are folded under a preview.
PREVIEW_CHARS = 1200
#: How many keys the desk looks at for calls in doubt on each page (a store of millions of
#: keys is paged through by ``keys list``, not by a web page).
DOUBT_SCAN_KEYS = 5000
#: How many audit entries (the latest) the page reads for each approval's history.
HISTORY_ENTRIES = 500


def shown(value: Any) -> str:
    """A value as a person is shown it: its text with every invisible or reordering
    character escaped (the template escapes HTML on top)."""
    return escape_invisible(value if isinstance(value, str) else str(value))


@dataclass(frozen=True)
class PendingView:
    """One approval that waits for a decision, as the page shows it (``ident``: its id as
    the store has it, for the forms; every other text as a person is shown it)."""

    ident: str
    approval_id: str
    tool: str
    effect: str
    description: str
    runnable: bool  # the loaded registry holds the tool
    arguments: str  # the canonical arguments, pretty, escaped: whole
    preview: str | None  # the start of a long text (None: short enough to show at once)
    size: int  # characters of the arguments' text
    digest: str
    task_id: str
    workflow: str
    key: str
    key_state: str
    expires_at: str
    time_left: str
    budget: str
    needed: int
    approved_by: list[str]
    history: list[str]
    anchor: str


@dataclass(frozen=True)
class DoubtView:
    """One call in doubt: a stale claim (its owner gone, its lease passed, or its outcome
    unknown), with the approval that asked for it when there is one (``ident`` and
    ``approval_ident``: the key and the approval's id as the store has them, for the forms)."""

    ident: str
    approval_ident: str | None
    key: str
    state: str
    owner: str
    approval_id: str | None
    tool: str | None
    arguments: str | None
    digest: str | None
    can_recheck: bool
    why_not: str | None
    anchor: str


@dataclass(frozen=True)
class Snapshot:
    """The page: the waiting approvals, the calls in doubt, and a version that changes
    whenever either does (the page's script reloads on a new one)."""

    pending: list[PendingView]
    doubts: list[DoubtView]
    version: str
    now: str
    scanned_all: bool = True
    notes: list[str] = field(default_factory=list)


def snapshot(store: OperableStore, registry: ToolRegistry, *,
             pending: Iterable[dict[str, Any]]) -> Snapshot:
    """The page's data: ``pending`` (the approvals' records, oldest first) and what the store
    says of each key, its audit log, and its calls in doubt."""
    import hashlib

    now = store.store_now()
    records = list(pending)
    history = _history(store, {str(r.get("approval_id")) for r in records})
    views = [_pending(store, registry, record, now, history.get(str(record.get("approval_id")), []))
             for record in records]
    doubts, scanned_all = _doubts(store, registry, now)
    digest = hashlib.sha256()
    for record in records:
        digest.update(json.dumps(record, sort_keys=True, default=str).encode("utf-8",
                                                                              "surrogatepass"))
    for doubt in doubts:
        digest.update(f"{doubt.key}\0{doubt.state}\0{doubt.owner}".encode("utf-8", "surrogatepass"))
    return Snapshot(views, doubts, digest.hexdigest()[:16], when(now), scanned_all)


def _pending(store: OperableStore, registry: ToolRegistry, record: dict[str, Any], now: float,
             history: list[str]) -> PendingView:
    tool = str(record.get("tool"))
    spec = registry.get(tool)
    text = arguments_text(record.get("arguments"))
    key = str(record.get("key"))
    expires = record.get("expires_at")
    left = (expires - now) if isinstance(expires, (int, float)) else None
    approval_id = str(record.get("approval_id"))
    return PendingView(
        ident=approval_id,
        approval_id=shown(approval_id),
        tool=shown(tool),
        effect=str(spec.effect) if spec is not None else "irreversible_write",
        description=shown(spec.description) if spec is not None else (
            "not in the loaded registry: this desk cannot run it (start it with --registry "
            "MODULE:ATTRIBUTE, the tools of the server that asked)"),
        runnable=spec is not None,
        arguments=text,
        preview=text[:PREVIEW_CHARS] if len(text) > PREVIEW_CHARS else None,
        size=len(text),
        digest=arguments_digest(record.get("arguments")),
        task_id=shown(record.get("task_id")),
        workflow=workflow_text(record.get("workflow")),
        key=shown(key),
        key_state=_key_state(store, store.key_entry(key), now),
        expires_at=when(expires),
        time_left=_duration(left) if left is not None else "-",
        budget=_budget(record),
        needed=people_needed(record),
        approved_by=[shown(name) for name in approved_by(record)],
        history=history,
        anchor=anchor_of(approval_id),
    )


def arguments_text(arguments: Any) -> str:
    """The arguments as a person reads them, whole: JSON with sorted keys, two spaces of
    indent, and every invisible or reordering character escaped (line by line: the JSON's
    own line breaks stay, a line break inside a value is written ``\n`` by JSON already)."""
    text = json_text(arguments, indent=2, sort_keys=True)
    return "\n".join(escape_invisible(line) for line in text.split("\n"))


def anchor_of(name: str) -> str:
    """An id usable as an HTML anchor for any approval id or key."""
    import hashlib

    return "a" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:12]


def _key_state(store: OperableStore, entry: KeyEntry | None, now: float) -> str:
    """Earlier attempts and the last status lookup, as the key's state in the store says."""
    if entry is None:
        return "no attempt yet (the key is free)"
    if entry.claim is None:
        return f"completed at {when(entry.updated_at)}: approving replays its result"
    claim = entry.claim
    owner = f"host {shown(claim.host)}, pid {claim.pid}"
    if claim.lease_until == 0:
        return (f"an attempt ended in doubt ({owner}): the status lookup could not say, or "
                "there is none; the claim waits for a lookup or a release")
    if store.claim_is_stale(claim, now):
        return f"an attempt's owner is gone or its lease passed ({owner}): stale"
    return f"an attempt is running now ({owner}, lease until {when(claim.lease_until)})"


def _budget(record: Mapping[str, Any]) -> str:
    left = record.get("budget_remaining")
    if isinstance(left, int) and not isinstance(left, bool):
        return f"{left} attempt{'s' if left != 1 else ''} left when it asked"
    return "not limited (or not known: the runner that asked kept no budget)"


def _duration(seconds: float) -> str:
    if seconds <= 0:
        return "expired"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"


def _history(store: OperableStore, approval_ids: set[str]) -> dict[str, list[str]]:
    """Each approval's audit entries (sign-offs, lookups asked again), from the latest
    :data:`HISTORY_ENTRIES` entries of the log."""
    found: dict[str, list[str]] = {}
    if not approval_ids:
        return found
    entries: list[str] = []
    after = 0
    while True:  # the log is read page by page; only the tail is kept
        rows = store.audit_page(after, 1000)
        entries = (entries + [text for _, text in rows])[-HISTORY_ENTRIES:]
        if len(rows) < 1000:
            break
        after = rows[-1][0]
    for text in entries:
        try:
            entry = json.loads(text)
        except ValueError:
            continue
        approval_id = entry.get("approval_id") if isinstance(entry, dict) else None
        if approval_id in approval_ids:
            who = entry.get("who") or "(no name)"
            found.setdefault(str(approval_id), []).append(
                f"#{entry.get('seq')} {when(entry.get('at'))}: {shown(entry.get('action'))} by "
                f"{shown(who)}" + (f" ({shown(entry['outcome'])})" if entry.get("outcome") else ""))
    return found


def _doubts(store: OperableStore, registry: ToolRegistry, now: float) -> tuple[list[DoubtView], bool]:
    """The stale claims among the first :data:`DOUBT_SCAN_KEYS` keys, each with the approval
    whose key it is, when there is one."""
    by_key: dict[str, dict[str, Any]] = {}
    for kept in store.approval_page():
        try:
            record = json.loads(kept.record)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("key"), str):
            by_key[record["key"]] = record  # the latest generation wins
    doubts: list[DoubtView] = []
    scanned = 0
    for entry in store.entries(page=500):
        scanned += 1
        if scanned > DOUBT_SCAN_KEYS:
            return doubts, False
        claim = entry.claim
        if claim is None or not store.claim_is_stale(claim, now):
            continue
        record = by_key.get(entry.key)
        doubts.append(_doubt(entry, record, registry))
    return doubts, True


def _doubt(entry: KeyEntry, record: dict[str, Any] | None, registry: ToolRegistry) -> DoubtView:
    claim = entry.claim
    assert claim is not None
    state = ("outcome unknown: the status lookup could not say, or there is none"
             if claim.lease_until == 0 else "stale: its owner is gone or its lease passed")
    owner = f"host {shown(claim.host)}, pid {claim.pid}, lease until {when(claim.lease_until)}"
    if record is None:
        return DoubtView(entry.key, None, shown(entry.key), state, owner, None, None, None, None,
                         False,
                         "no approval names this key, so its arguments are not in the store: the"
                         " next call of the same write asks its status lookup; or release it"
                         " once you checked", anchor_of(entry.key))
    tool = str(record.get("tool"))
    spec = registry.get(tool)
    asking = record.get("state") == SETTLED and settled_result(record).get("error") == (
        "outcome_unknown") or record.get("state") == "running"
    why_not = None
    if spec is None:
        why_not = f"{shown(tool)} is not in the loaded registry: start the desk with --registry"
    elif spec.status_lookup is None:
        why_not = f"{shown(tool)} has no status lookup: check by hand, then release with a note"
    elif not asking:
        why_not = "its approval is not in doubt: release the claim once you checked"
    return DoubtView(
        ident=entry.key, approval_ident=str(record.get("approval_id")),
        key=shown(entry.key), state=state, owner=owner,
        approval_id=shown(record.get("approval_id")), tool=shown(tool),
        arguments=arguments_text(record.get("arguments")),
        digest=arguments_digest(record.get("arguments")),
        can_recheck=why_not is None, why_not=why_not, anchor=anchor_of(entry.key))
