"""The PostgreSQL store's outages: one log line when the server stops answering, one when it
answers again, and the address those lines (and every error) name, never with a password.

While a server is down every call answers ``busy`` at once (after its connect bound) and runs
nothing; what an operator needs is when the outage began, why the last connection attempt
failed and when it ended, not a line per call. psycopg_pool logs a WARNING for every failed
attempt of every pool (about six per call): :class:`PoolNoise`, installed on its logger when
this module is first imported, keeps the reason of the store's own pools' failures for
:func:`outage_begins` and drops those records; other pools' records pass as they are. (Used
by :mod:`agentkit.policy.stores.postgres` only; ``import agentkit`` never loads it.)
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from typing import Any

__all__ = ["PoolNoise", "outage_begins", "outage_ends", "outages", "pool_name",
           "retired", "shown_address", "why_unreachable"]

logger = logging.getLogger("agentkit.policy.stores")

_POOL_PREFIX = "agentkit postgresql://"  # every pool_name() begins so (an address is a URL)
_outage_lock = threading.Lock()
outages: dict[str, float] = {}  # address -> time.monotonic() when the outage was noticed
_last_failure: dict[str, str] = {}  # address -> why its last connection attempt failed
# Connections the store closed itself (the server had left them) before handing them back.
retired: weakref.WeakSet[Any] = weakref.WeakSet()


class PoolNoise(logging.Filter):
    """psycopg_pool logs a WARNING for every failed connection attempt of every pool (about
    six per call while a server is down), and one for every closed connection handed back.
    For the store's own pools (named by :func:`pool_name`) the reason of a failed attempt is
    kept, for the one line an outage gets, and those records are dropped; other pools'
    records pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if record.levelno < logging.WARNING or not isinstance(args, tuple) or not args:
            return True
        name = args[0]
        if not isinstance(name, str):
            try:
                return name not in retired  # closed here on purpose: nothing to warn about
            except TypeError:  # not hashable: not one of ours
                return True
        if not name.startswith(_POOL_PREFIX):
            return True
        if len(args) > 1 and isinstance(args[1], BaseException):
            _last_failure[name.split(" ")[1]] = _first_line(args[1])
        return False


logging.getLogger("psycopg.pool").addFilter(PoolNoise())


def pool_name(address: str, level: str) -> str:
    """The name the store gives its pool of ``level`` sessions to ``address`` (a
    :func:`shown_address`): :class:`PoolNoise` knows the store's own pools by it."""
    return f"agentkit {address} {level}"


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def why_unreachable(address: str) -> str:
    return _last_failure.get(address) or "is the server up and reachable?"


def outage_begins(address: str, waited: float) -> None:
    """Log the outage once, when the first call finds no connection."""
    with _outage_lock:
        if address in outages:
            return
        outages[address] = time.monotonic()
    logger.warning(
        "%s: unreachable, no connection within %g s (%s); calls answer busy and run nothing"
        " until it answers again", address, waited, why_unreachable(address),
    )


def outage_ends(address: str) -> None:
    """Log the end of the outage once, when a call gets a connection again."""
    with _outage_lock:
        began = outages.pop(address, None)
        _last_failure.pop(address, None)
    if began is not None:
        logger.warning("%s: reachable again, after %.1f s unreachable", address,
                       time.monotonic() - began)


def shown_address(dsn: str) -> str:
    """The DSN as logs may show it: never the password."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(dsn)
    except Exception:  # an unparsable DSN is reported by connect, not here
        return "postgresql://<unparsable dsn>"
    user = f"{parts['user']}@" if parts.get("user") else ""
    host = parts.get("host") or "localhost"
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"postgresql://{user}{host}{port}/{parts.get('dbname') or ''}"
