"""The one ``run_once`` algorithm every store shares, written over a small transaction interface.

A retry is only safe if the caller can tell "not done" from "done, but the answer was lost".
The store remembers, per idempotency key, either a *claim* (someone is running it now) or a
*completed result* (it is done: replay it). Every backend implements :class:`Transaction`
(a few reads and compare-and-swap writes inside one atomic section) and :class:`StoreBase`
does the rest: each step's decision (claim, replay, conflict, take over, complete); the order
of the steps and what follows a failure is the policy's (``agentkit.policy.once``), which a
store's ``run_once`` performs. Writing the algorithm once is what makes "identical
semantics" true rather than hoped for. Results and approval records are kept as canonical
JSON text in every store, so a replay returns a fresh copy that no caller can have mutated,
and a value the durable stores could not keep fails in the memory store too.

Why recovery asks before it runs
    A stale claim means a write *may* have landed. The taker-over first asks ``recover``
    (the tool's status lookup): a receipt settles the key as done, None means "not done"
    and the operation runs, an exception means "unknown" and nothing runs. Without a lookup
    the answer is ``outcome_unknown`` until a human calls ``release(key)``. A lookup that
    cannot say leaves the claim in place but already stale, so the next caller asks again
    instead of waiting out a lease nobody is using. Taking over is a compare-and-swap on the
    claim's token, so two recoverers never both run.

Smaller choices, each on the safe side
    A given fingerprint must equal the stored one, and a key stored *without* one conflicts
    with any fingerprint: the store cannot prove the payloads match. An operation that
    raises an ``Exception`` frees the key (nothing useful happened); one interrupted by
    ``KeyboardInterrupt`` or ``SystemExit`` may have half-written, so its claim is kept
    and marked stale for the lookup to settle. An ok result that is not JSON-serialisable
    cannot be kept: the claim is kept (stale) and ``TypeError`` is raised.

Live claims and tokens
    A claim held by an attempt that is still running *in this process* is never stale,
    whatever its lease says: a hung write may outlive any lease, and taking its key over
    would start a second writer beside it. So every claim this process holds is registered
    by its token while its operation runs; a caller that passes ``on_claim`` receives the
    token and keeps the claim live after an ``outcome_unknown`` until it hands the token
    back to ``abandon(key, token)`` (the runner does so when the hung attempt really
    returns). ``abandon`` acts only on the claim with that token, never on a newer claim of
    the same key. Other processes cannot see this registry: for them the owner probe and
    the lease decide, which is why a lease must cover the owner's worst case.

Store failures
    A backend that cannot be reached or used raises :class:`StoreError` (the store's path
    or address and the reason). ``run_once`` never lets it out: when the claim cannot be
    taken it answers ``busy`` (nothing ran, safe to retry); when the store fails after the
    operation ran it answers ``outcome_unknown`` (not retryable: the write may have landed),
    and both are logged on the ``agentkit`` logger with the store and the reason. The other
    methods raise ``StoreError`` for their caller to decide.

Time
    Lease deadlines come from the transaction's clock (:meth:`Transaction.now`): the store's
    wall clock for memory and SQLite, the database's clock for PostgreSQL, so workers on
    several hosts judge a lease by one clock.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from agentkit.boundary.canonical import canonical_json
from agentkit.boundary.errors import ErrorCode, NotStarted, failure
from agentkit.policy.stores.audit import AUDIT_LOCK, GENESIS, Signer, env_signer, seal
from agentkit.policy.stores.owner import this_host, this_process

if TYPE_CHECKING:
    from typing_extensions import Self  # typing.Self needs Python 3.11

__all__ = ["Claim", "ClaimLost", "Result", "RunOnce", "StoreBase", "StoreError", "Transaction",
           "check_claim", "set_run_once"]

logger = logging.getLogger("agentkit.policy.stores")

Result = dict[str, Any]

CLAIMED = "claimed"
TAKEN_OVER = "taken_over"


class StoreError(Exception):
    """The store's backend cannot be reached or used; the message names the store (its path,
    or its address without a password) and the reason."""


class ClaimLost(NotStarted):
    """The key a transactional handler was to run under is not its call's to run any more
    (completed, or claimed by another call, meanwhile): nothing ran. :attr:`answer` is what
    the key says to this call: its replay (or ``idempotency_conflict``), or ``in_progress``."""


def check_claim(tx: Transaction, key: str, mine: Claim) -> None:
    """Inside an effect transaction, holding the key's lock: go on when the key's claim is
    ``mine``, or when the key is free (then ``mine`` is written here, in the effect's own
    transaction: a transactional write's claim that was not committed before it,
    docs/design.md#transactional-writes); else raise :class:`ClaimLost` with what the key
    says."""
    tx.lock(key)
    stored = tx.result(key)
    if stored is None:
        claim = tx.claim(key)
        if claim is None and tx.insert_claim(key, mine):
            return
        if claim is not None and claim.token == mine.token:
            return
        answer = failure(ErrorCode.IN_PROGRESS)
    else:
        answer = StoreBase._replay(stored, mine.fingerprint)
    raise ClaimLost(f"the key {key!r} is not this call's to run any more: nothing ran", answer)


class RunOnce(Protocol):
    """What performs :meth:`StoreBase.run_once`: the same arguments, the store first."""

    def __call__(
        self, store: StoreBase, key: str, operation: Callable[[], Result],
        fingerprint: str | None = None, *, recover: Callable[[], Result | None] | None = None,
        lease_seconds: float | None = None, full_sync: bool = False,
        on_claim: Callable[[str], None] | None = None,
    ) -> Result: ...


_run_once: RunOnce | None = None


def set_run_once(function: RunOnce) -> None:
    """Have :meth:`StoreBase.run_once` performed by ``function``.

    The claim → run → complete orchestration is the policy's (``agentkit.policy.once``), and a
    store sits below the policy: it imports none of it (docs/design.md#layers). So the policy
    hands its ``run_once`` down when it is imported, which every store module's import does
    first (each lives in ``agentkit.policy``, whose package imports the runner and its steps).
    """
    global _run_once
    _run_once = function


# Tokens of the claims whose operation is running in this process (see "Live claims").
_live_lock = threading.Lock()
_live_tokens: set[str] = set()


def hold(token: str) -> None:
    """Register a claim of this process as live: it is never stale while registered."""
    with _live_lock:
        _live_tokens.add(token)


def let_go(token: str) -> None:
    """The claim's attempt has returned: from now on its lease and owner decide."""
    with _live_lock:
        _live_tokens.discard(token)


def is_live(token: str) -> bool:
    with _live_lock:
        return token in _live_tokens


# A claim's token: a random prefix per process and a counter. Unique across processes and
# hosts like ``os.urandom(16)`` per claim, without a system call per claim.
_token_prefix = os.urandom(12).hex()
_token_numbers = itertools.count()


def new_token() -> str:
    """A fresh claim token, unique across every process and host."""
    return f"{_token_prefix}{next(_token_numbers):x}"


def _forget_live_claims() -> None:
    # A forked child runs none of its parent's operations, and must not repeat its tokens.
    global _live_lock, _token_prefix, _token_numbers
    _live_lock = threading.Lock()
    _live_tokens.clear()
    _token_prefix = os.urandom(12).hex()
    _token_numbers = itertools.count()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_live_claims)


@dataclass(frozen=True)
class Claim:
    """Who runs a key now, and until when they may be presumed alive."""

    token: str  # unique per claim: the compare-and-swap handle
    fingerprint: str | None
    host: str
    pid: int
    start_time: int | None
    lease_until: float  # seconds since the epoch, by the transaction's clock


class Transaction(Protocol):
    """What the store's steps need from a backend inside one atomic section.

    A key holds either a claim or a completed result (one row per key in the durable
    stores). Results are ``(fingerprint, result JSON text)``; approvals are their JSON text.
    A ``write`` transaction must make its reads and writes one atomic step (a lock, ``BEGIN
    IMMEDIATE``, or ``lock(name)`` for backends that lock per key). ``insert_claim`` returns
    False when the key is taken already; ``replace_claim`` and ``delete_claim`` act on a
    claim (never on a result) with that token. ``complete`` stores the result unless one is
    there already (the first one wins), ends whatever claim the key has, and returns True
    when that claim had ``token`` (False: the claim was lost, taken over or released).
    ``audit_tail`` is the audit log's last entry (its number and hash, None when empty) and
    ``insert_audit`` appends one (:mod:`~agentkit.policy.stores.audit`), under
    ``lock(AUDIT_LOCK)``.
    """

    def now(self) -> float: ...
    def lock(self, name: str) -> None: ...
    def result(self, key: str) -> tuple[str | None, str] | None: ...
    def claim(self, key: str) -> Claim | None: ...
    def insert_claim(self, key: str, claim: Claim) -> bool: ...
    def replace_claim(self, key: str, token: str, claim: Claim) -> bool: ...
    def delete_claim(self, key: str, token: str | None) -> bool: ...
    def complete(self, key: str, token: str, fingerprint: str | None, text: str) -> bool: ...
    def approval(self, approval_id: str) -> str | None: ...
    def insert_approval(self, approval_id: str, state: str, text: str) -> None: ...
    def replace_approval(self, approval_id: str, state: str, text: str) -> None: ...
    def approvals(self, state: str | None) -> list[str]: ...
    def audit_tail(self) -> tuple[int, str] | None: ...
    def insert_audit(self, seq: int, digest: str, text: str) -> None: ...

    @property
    def connection(self) -> Any:
        """The backend's own connection inside this transaction (SQL stores), for a
        transactional handler's effect; the memory store has none."""
        ...


def conflicts(given: str | None, stored: str | None) -> bool:
    """A given fingerprint must equal the stored one; None given means "do not check".

    A key first used without a fingerprint and later with one is a conflict: the store
    cannot prove the payloads match, and refusing is the safe side.
    """
    return given is not None and given != stored


def is_ok(result: Any) -> bool:
    return isinstance(result, dict) and result.get("ok") is True


def record_text(record: Any) -> str:
    """An approval record's stored text; it must be a dict with a str ``state``."""
    if not isinstance(record, dict) or not isinstance(record.get("state"), str):
        raise ValueError('an approval record must be a dict with a str "state"')
    return canonical_json(record)


class StoreBase:
    """run_once and the approval records, over a backend's :meth:`transaction`."""

    #: Look for a completed result in a read before taking the write lock: a replay then
    #: never waits for writers. A networked backend, for which each round trip costs more
    #: than its per-key lock, reads inside the claiming transaction instead.
    read_before_claim = True

    #: Whether a step may wait (on a lock, a disk, a network): the async runner then runs it on
    #: a worker thread (or the store's async twin ``a<step>``), never on the event loop.
    blocking = True

    #: Whether a handler's effect can commit in the store's own transaction with the key's
    #: result (:meth:`effect_transaction`; ``ToolSpec(transactional=True)``).
    holds_effects = False

    #: Who signs the audit entries this store appends (:mod:`~agentkit.policy.stores.audit`):
    #: None signs with the key ``$AGENTKIT_AUDIT_SIGNING_KEY`` names, when it names one.
    audit_signer: Signer | None = None

    def __init__(self, claim_ttl_seconds: float) -> None:
        ttl = float(claim_ttl_seconds)
        if not ttl > 0:  # also refuses NaN
            raise ValueError("claim_ttl_seconds must be > 0")
        self.claim_ttl_seconds = ttl
        self.host = this_host()

    # ---- what a backend provides

    def transaction(
        self, *, write: bool, full_sync: bool = False
    ) -> AbstractContextManager[Transaction]:  # pragma: no cover - abstract
        """One atomic section; ``full_sync`` asks a durable backend to make it survive a
        power cut before it returns."""
        raise NotImplementedError

    @contextmanager
    def effect_transaction(self, key: str, mine: Claim) -> Iterator[Transaction]:
        """One write transaction, durable at its commit, for a handler's effect and the key's
        result together (docs/design.md#transactional-writes): it holds the key's lock from
        its start and raises :class:`ClaimLost` unless the key's claim is ``mine`` or the
        key is free (then ``mine`` is written in it: :func:`check_claim`), so a key
        completed or claimed by another call meanwhile runs nothing. The caller runs
        the handler with ``tx.connection``, then ``tx.complete(...)``; the commit is the
        context's exit, a rollback its exception. A store that cannot (the memory store)
        raises ``TypeError``."""
        if not self.holds_effects:
            raise TypeError(
                f"{type(self).__name__} cannot hold a handler's effect in its transaction")
        yield from ()  # pragma: no cover - a store that says it can provides its own
        raise NotImplementedError

    def owner_gone(self, claim: Claim) -> bool:
        """True when the claim's owner is provably gone; the memory store never knows."""
        return False

    # ---- public interface

    def run_once(
        self,
        key: str,
        operation: Callable[[], Result],
        fingerprint: str | None = None,
        *,
        recover: Callable[[], Result | None] | None = None,
        lease_seconds: float | None = None,
        full_sync: bool = False,
        on_claim: Callable[[str], None] | None = None,
    ) -> Result:
        """Run ``operation`` at most once per key (docs/design.md#stores; the module docstring).

        ``lease_seconds`` is the caller's worst case for one run (its timeout and then
        some): the claim is not presumed abandoned before it passes, even if it is longer
        than ``claim_ttl_seconds``. ``full_sync`` makes a durable store commit this call's
        claim and result durably, for writes that must not happen twice even across a
        power cut. ``on_claim`` is called with the claim's token once this call holds the
        claim, before anything runs; a caller that takes the token keeps an
        ``outcome_unknown`` claim live until it passes the token to :meth:`abandon`.

        Never raises :class:`StoreError`: a store that fails before the claim gives
        ``busy`` (nothing ran), one that fails after the operation ran ``outcome_unknown``.

        What happens between this store's steps (claim, run, complete, recovery) is policy,
        written once as steps that both of the runner's drivers perform: this is
        ``agentkit.policy.once.run_once``, which the policy hands to the stores when it is
        imported (:func:`set_run_once`; a store imports nothing of the policy above it).
        """
        if _run_once is None:  # only a store module executed outside the agentkit package
            raise RuntimeError("run_once is performed by agentkit.policy.once: import agentkit")
        return _run_once(self, key, operation, fingerprint, recover=recover,
                         lease_seconds=lease_seconds, full_sync=full_sync, on_claim=on_claim)

    # ---- the store's steps: each one atomic section (docs/design.md#stores)

    def claim(
        self, key: str, fingerprint: str | None, ttl: float, *, may_take_over: bool,
        full_sync: bool = False, flush: bool = True,
    ) -> Result | tuple[str, Claim]:
        """Claim ``key``: a final answer (a replay, ``in_progress``, a conflict, or
        ``outcome_unknown`` for a stale claim nobody may take over), or ``(CLAIMED, claim)`` /
        ``(TAKEN_OVER, claim)`` that this caller now holds. Raises :class:`StoreError`.

        ``flush=False``: the claim needs no flush of its own (a transactional write, whose
        effect commits with its result: a claim a power cut forgot leaves nothing behind);
        a store whose claims cost a flush may commit it at its results' level, and a store
        whose effect transaction serialises its writers anyway (SQLite) may leave a free
        key's claim unwritten: :meth:`effect_transaction` writes it, in the one commit."""
        if self.read_before_claim:
            with self.transaction(write=False) as tx:  # a replay takes no write lock
                stored = tx.result(key)
            if stored is not None:
                return self._replay(stored, fingerprint)
        return self.claim_carefully(key, fingerprint, ttl, may_take_over, full_sync)

    def claim_carefully(
        self, key: str, fingerprint: str | None, ttl: float, may_take_over: bool,
        full_sync: bool,
    ) -> Result | tuple[str, Claim]:
        """The claim's careful path (a key claimed already, stale or taken over): the whole
        decision in one write transaction. A backend's fast path falls back to it."""
        with self.transaction(write=True, full_sync=full_sync) as tx:
            return self._decide(tx, key, fingerprint, ttl, may_take_over=may_take_over)

    def complete(self, key: str, mine: Claim, result: Result, full_sync: bool = False) -> None:
        """Store the result and drop the claim in one atomic section.

        Only the claim needs the flush of ``full_sync``: if a power cut loses the result,
        the durable claim comes back and the status lookup settles the key.
        """
        text = self.result_text(key, mine, result)
        with self.transaction(write=True) as tx:
            tx.lock(key)
            still_mine = tx.complete(key, mine.token, mine.fingerprint, text)
        if not still_mine:
            self.claim_lost(key)

    def drop(self, key: str, mine: Claim) -> None:
        """Free the key, unless someone else holds it by now."""
        with self.transaction(write=True) as tx:
            tx.lock(key)
            tx.delete_claim(key, mine.token)

    def abandon_claim(self, key: str, mine: Claim) -> None:
        """Keep the claim but mark it stale at once, so the next caller asks the lookup."""
        let_go(mine.token)
        with self.transaction(write=True) as tx:
            tx.lock(key)
            tx.replace_claim(key, mine.token, dataclasses.replace(mine, lease_until=0.0))

    # ---- helpers of the steps, for backends that write their own fast paths

    def new_claim(self, fingerprint: str | None, now: float, ttl: float) -> Claim:
        """A claim of this process, with a fresh token, whose lease ends at ``now + ttl``."""
        pid, start = this_process()
        return Claim(new_token(), fingerprint, self.host, pid, start, now + ttl)

    def result_text(self, key: str, mine: Claim, result: Result) -> str:
        """The result's stored text; one that cannot be stored keeps the claim (stale)."""
        try:
            return canonical_json(result)
        except (TypeError, ValueError) as exc:
            # It happened, but cannot be kept: let a lookup decide.
            self._quietly(self.abandon_claim, key, mine, "the claim keeps its lease")
            raise TypeError("an ok result must be JSON-serialisable to be stored") from exc

    @staticmethod
    def claim_lost(key: str) -> None:
        logger.warning("claim on key %r was lost before the run finished (lease too short?)", key)

    # ---- more of the public interface

    def release(self, key: str) -> None:
        """Clear a claim, whoever holds it: a human's "I checked, it did not happen" (the
        audit log records it)."""
        with self.transaction(write=True) as tx:
            tx.lock(key)
            claim = tx.claim(key)
            if claim is not None:
                self.audit_in(tx, {"action": "release", "who": None, "key": key,
                                   "checked": False, "owner": _owner(claim)})
            tx.delete_claim(key, None)
        if claim is not None:
            let_go(claim.token)

    def abandon(self, key: str, token: str) -> None:
        """Mark the claim with this ``token`` stale now: its attempt is running nothing more.

        The runner calls it when a write ended ``outcome_unknown`` and its attempt has really
        returned: the next caller then asks the status lookup at once, instead of being told
        ``in_progress`` until a lease that nobody is using runs out. A newer claim on the
        same key (another token) is left alone.
        """
        let_go(token)
        with self.transaction(write=True) as tx:
            tx.lock(key)
            claim = tx.claim(key)
            if claim is not None and claim.token == token:
                tx.replace_claim(key, token, dataclasses.replace(claim, lease_until=0.0))

    def result(self, key: str) -> Result | None:
        """The stored completed result (a fresh copy), or None."""
        with self.transaction(write=False) as tx:
            stored = tx.result(key)
        return None if stored is None else _loads(stored[1])

    def create_approval(self, approval_id: str, record: dict[str, Any]) -> dict[str, Any]:
        """Insert the record unless one with this id exists; return the stored one (a copy).

        One atomic insert-if-absent, committed durably in the durable stores: two processes
        opening the same approval at once end up with one record.
        """
        text = record_text(record)
        with self.transaction(write=True, full_sync=True) as tx:
            tx.lock(approval_id)
            existing = tx.approval(approval_id)
            if existing is None:
                tx.insert_approval(approval_id, record["state"], text)
        return _loads(text if existing is None else existing)

    def get_approval(self, approval_id: str) -> dict[str, Any] | None:
        """A fresh copy of the record, or None."""
        with self.transaction(write=False) as tx:
            text = tx.approval(approval_id)
        return None if text is None else _loads(text)

    def update_approval(
        self, approval_id: str, expected_state: str, record: dict[str, Any]
    ) -> bool:
        """Compare-and-swap on ``state``: approve and deny racing each other cannot both win."""
        text = record_text(record)
        with self.transaction(write=True, full_sync=True) as tx:
            tx.lock(approval_id)
            current = tx.approval(approval_id)
            if current is None or _loads(current).get("state") != expected_state:
                return False
            tx.replace_approval(approval_id, record["state"], text)
            return True

    def decide_approval(
        self, approval_id: str, expected: dict[str, Any], record: dict[str, Any],
        audit: dict[str, Any] | None,
    ) -> bool:
        """A person's decision: compare-and-swap the whole record (``expected`` is the record
        as the decider read it: a decision made on an older record fails, so two sign-offs
        racing cannot lose one) and append ``audit`` to the audit log in the same
        transaction, so a decision is never kept without its evidence, nor the evidence
        without the decision. (``audit`` None: a change that is no person's decision.)"""
        text = record_text(record)
        with self.transaction(write=True, full_sync=True) as tx:
            tx.lock(approval_id)
            current = tx.approval(approval_id)
            if current is None or _loads(current) != expected:
                return False
            if audit is not None:  # first: an entry that cannot be written changes nothing
                self.audit_in(tx, audit)
            tx.replace_approval(approval_id, record["state"], text)
            return True

    def append_audit(self, fields: dict[str, Any]) -> dict[str, Any]:
        """Append one entry (``fields``: who, action, what) to the audit log, in a
        transaction of its own; returns the sealed entry. Raises ``StoreError``, and
        ``ValueError``/``ImportError`` for a signing key that cannot be used."""
        with self.transaction(write=True, full_sync=True) as tx:
            return self.audit_in(tx, fields)

    def audit_in(self, tx: Transaction, fields: dict[str, Any]) -> dict[str, Any]:
        """Inside a write transaction: append the entry after the log's last one (its
        number, its ``prev``, the transaction's clock), signed when a key is configured. An
        entry that cannot be made or signed raises :class:`StoreError`: the transaction, and
        so the decision it records, is rolled back."""
        try:
            signer = self.audit_signer if self.audit_signer is not None else env_signer()
        except (ValueError, ImportError) as exc:
            raise StoreError(f"the audit log's signing key cannot be used: {exc}") from exc
        tx.lock(AUDIT_LOCK)
        tail = tx.audit_tail()
        seq, prev = (1, GENESIS) if tail is None else (tail[0] + 1, tail[1])
        try:
            entry = seal(seq, prev, tx.now(), fields, signer)
        except (TypeError, ValueError) as exc:  # a field JSON cannot hold
            raise StoreError(f"the audit entry cannot be written: {exc}") from exc
        except Exception as exc:  # the signer failed: nothing is kept, the decision neither
            raise StoreError(f"the audit entry cannot be signed: {exc}") from exc
        tx.insert_audit(seq, entry["hash"], canonical_json(entry))
        return entry

    def list_approvals(self, state: str | None = None) -> list[dict[str, Any]]:
        """Every approval record in the store (of every process), in creation order;
        only those in ``state`` when it is given."""
        with self.transaction(write=False) as tx:
            texts = tx.approvals(state)
        return [_loads(text) for text in texts]

    def close(self) -> None:
        """Release resources; the memory store has none."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ---- steps of run_once

    @staticmethod
    def _replay(stored: tuple[str | None, str], fingerprint: str | None) -> Result:
        if conflicts(fingerprint, stored[0]):
            return failure(ErrorCode.IDEMPOTENCY_CONFLICT)
        result = _loads(stored[1])
        result["replayed"] = True
        return result

    def _is_stale(self, claim: Claim, now: float) -> bool:
        if is_live(claim.token):
            return False  # its attempt is running in this process, whatever the lease says
        return claim.lease_until <= now or self.owner_gone(claim)

    def judge(
        self, stored: tuple[str | None, str] | None, claim: Claim | None, now: float,
        fingerprint: str | None, ttl: float, *, may_take_over: bool,
    ) -> Result | tuple[str, Claim, str | None]:
        """The claim's decision from what the key holds (no I/O): a final answer, or the
        claim to write: ``(CLAIMED, mine, None)`` to insert, ``(TAKEN_OVER, mine, token)``
        to swap for the stale claim with ``token``."""
        if stored is not None:  # completed since the fast path looked
            return self._replay(stored, fingerprint)
        if claim is None:
            return (CLAIMED, self.new_claim(fingerprint, now, ttl), None)
        if conflicts(fingerprint, claim.fingerprint):
            return failure(ErrorCode.IDEMPOTENCY_CONFLICT)
        if not self._is_stale(claim, now):
            return failure(ErrorCode.IN_PROGRESS)
        if not may_take_over:
            # Nobody can say whether the write landed; leave the claim for a lookup or a human.
            return failure(ErrorCode.OUTCOME_UNKNOWN, retryable=False)
        return (TAKEN_OVER, self.new_claim(claim.fingerprint, now, ttl), claim.token)

    def _decide(
        self, tx: Transaction, key: str, fingerprint: str | None, ttl: float, *,
        may_take_over: bool,
    ) -> Result | tuple[str, Claim]:
        """Inside one atomic section: a final answer, or the claim this caller now holds."""
        tx.lock(key)
        stored = tx.result(key)
        claim = None if stored is not None else tx.claim(key)
        plan = self.judge(stored, claim, tx.now(), fingerprint, ttl, may_take_over=may_take_over)
        if isinstance(plan, dict):
            return plan
        _, mine, old_token = plan
        if old_token is None:
            if not tx.insert_claim(key, mine):
                return failure(ErrorCode.IN_PROGRESS)
            return (CLAIMED, mine)
        if not tx.replace_claim(key, old_token, mine):
            return failure(ErrorCode.IN_PROGRESS)
        return (TAKEN_OVER, mine)

    def _quietly(
        self, step: Callable[[str, Claim], None], key: str, mine: Claim, consequence: str
    ) -> None:
        """Tidy a claim; a failing store is logged, never raised."""
        try:
            step(key, mine)
        except StoreError as exc:
            logger.error("could not update the claim on key %r (%s): %s", key, consequence, exc)


def _owner(claim: Claim) -> dict[str, Any]:
    """A claim's owner as an audit entry records it."""
    return {"host": claim.host, "pid": claim.pid, "lease_until": claim.lease_until}


#: A claim's owner as an audit entry records it (for the operations module).
claim_owner = _owner


def _loads(text: str) -> dict[str, Any]:
    value = json.loads(text)
    assert isinstance(value, dict)
    return value


#: A stored record's JSON text as a fresh dict, for a backend's own paths.
loads = _loads
