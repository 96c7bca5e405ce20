"""Idempotency stores: how a write that may be asked for twice is done at most once.

One algorithm, several backends (``docs/design.md#stores``):

- :mod:`~agentkit.policy.stores.algorithm`: ``run_once`` and the approval records, written
  once over a small :class:`Transaction` interface (claims, takeover, recovery, decisions);
- :mod:`~agentkit.policy.stores.memory`: :class:`IdempotencyStore`, in memory, one process;
- :mod:`~agentkit.policy.stores.sqlite`: :class:`SQLiteIdempotencyStore`, durable, the
  processes of one machine;
- :mod:`~agentkit.policy.stores.postgres`: :class:`PostgresIdempotencyStore`, durable,
  the workers of several hosts (optional extra ``postgres``; loaded on first use, so
  psycopg is never imported by ``import agentkit``);
- :mod:`~agentkit.policy.stores.owner`: the process-liveness probe (host, pid, start time)
  that tells a claim whose owner was killed from one whose owner is still running;
- :mod:`~agentkit.policy.stores.operations`: what an operator does with any of them: list
  and show keys, release a stale claim, copy a store into another (never while a write may
  still land in the source), purge what is past retention;
- :mod:`~agentkit.policy.stores.address`: ``open_store(url)``, one address per store
  (``memory:``, ``sqlite:///path``, ``postgresql://…``), ``open_existing_store(url)`` for
  the operator's commands (only an agentkit store; nothing created), and the address as
  it may be shown (never a password, by libpq's own reading).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from agentkit.policy.stores.address import open_existing_store, open_store, public_address
from agentkit.policy.stores.algorithm import Claim, StoreBase, StoreError, Transaction
from agentkit.policy.stores.memory import IdempotencyStore
from agentkit.policy.stores.operations import (
    DEFAULT_RETENTION_SECONDS,
    ApprovalEntry,
    Copied,
    CopyRefused,
    KeyEntry,
    OperableStore,
    Purged,
    Released,
    copy_store,
)
from agentkit.policy.stores.sqlite import SQLiteIdempotencyStore

if TYPE_CHECKING:
    from agentkit.policy.stores.postgres import (
        PostgresIdempotencyStore as PostgresIdempotencyStore,
    )

__all__ = [
    "DEFAULT_RETENTION_SECONDS",
    "ApprovalEntry",
    "Claim",
    "Copied",
    "CopyRefused",
    "IdempotencyStore",
    "KeyEntry",
    "OperableStore",
    "PostgresIdempotencyStore",
    "Purged",
    "Released",
    "SQLiteIdempotencyStore",
    "StoreBase",
    "StoreError",
    "Transaction",
    "copy_store",
    "open_existing_store",
    "open_store",
    "public_address",
]


def __getattr__(name: str) -> Any:
    if name == "PostgresIdempotencyStore":
        value = importlib.import_module("agentkit.policy.stores.postgres").PostgresIdempotencyStore
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
