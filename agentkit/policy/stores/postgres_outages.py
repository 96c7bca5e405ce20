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

from agentkit.policy.stores.address import libpq_reading, scrub

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


def why_unreachable(address: str, dsn: str = "") -> str:
    """Why the last connection attempt to ``address`` failed (libpq's words, without anything
    of ``dsn``'s password)."""
    reason = _last_failure.get(address)
    if not reason:
        return "is the server up and reachable?"
    return scrub(reason, dsn) if dsn else reason


def outage_begins(address: str, waited: float, dsn: str = "") -> None:
    """Log the outage once, when the first call finds no connection (the reason scrubbed of
    ``dsn``'s password)."""
    with _outage_lock:
        if address in outages:
            return
        outages[address] = time.monotonic()
    logger.warning(
        "%s: unreachable, no connection within %g s (%s); calls answer busy and run nothing"
        " until it answers again", address, waited, why_unreachable(address, dsn),
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
    """The DSN as logs, errors and ``repr`` show it: ``postgresql://user@host:port/dbname``,
    never the password, nor any of what a person typed as one.

    libpq's reading names the parts, unless the URL holds text that libpq does not read as
    the password but a person may have typed as one: a raw ``@`` or ``/`` in it
    (``postgresql://u:p/w@host/db`` is, to libpq, the host ``u``, the port ``p`` and the
    database ``w@host/db``). Then the parts are the URL's as typed: the user, and what
    follows its last ``@`` up to the query."""
    parts = libpq_reading(dsn)
    if parts is None:  # an unparsable DSN is reported by connect, not here
        return "postgresql://<unparsable-dsn>"
    text = str(dsn)
    typed = _typed_user_and_server(text)
    if typed is not None:
        return typed
    user = f"{parts['user']}@" if parts.get("user") else ""
    port = parts.get("port", "")
    port = f":{port}" if port.strip(",") else ""
    return f"postgresql://{user}{parts.get('host') or 'localhost'}{port}/{parts.get('dbname', '')}"


def _typed_user_and_server(text: str) -> str | None:
    """``postgresql://user@server`` as typed, when the URL's password (from the user's ``:``
    to its last ``@``) is not what libpq reads as one; None when it is (or there is none)."""
    start = text.find("://")
    if start < 0:
        return None
    rest = text[start + 3:]
    last_at = rest.rfind("@")
    colon = rest.find(":", 0, last_at) if last_at >= 0 else -1
    if colon < 0:
        return None  # no password typed in the URL's user part
    first = min((i for i in (rest.find("@"), rest.find("/")) if i >= 0), default=-1)
    if first == last_at:
        return None  # libpq reads the same user part: its parts hold nothing of the password
    server = rest[last_at + 1:].split("?", 1)[0]
    user = rest[:colon]
    return f"postgresql://{user + '@' if user else ''}{server}"
