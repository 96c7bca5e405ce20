"""One address per store: ``open_store(url)`` (docs/design.md#operating-the-stores).

The same text names a store in code, in ``AGENTKIT_STORE`` for the command line, and in a
deployment's settings:

- ``memory:`` -- :class:`~agentkit.policy.stores.memory.IdempotencyStore`, this process only;
- ``sqlite:///relative/path.sqlite3`` and ``sqlite:////absolute/path.sqlite3`` -- the file
  after the third slash, as SQLAlchemy reads it (so a fourth slash starts an absolute path);
- ``postgresql://user:password@host:5432/dbname?sslmode=require`` (or ``postgres://``, or
  SQLAlchemy's ``postgresql+psycopg://``) -- handed to libpq as it is.

Settings are keywords (``open_store(url, claim_ttl_seconds=600, retention_seconds=86400)``),
passed to the store's constructor. A URL that names no store agentkit knows is a
``ValueError`` naming the scheme; no message, log or repr ever shows a password
(:func:`public_address` is what they show).
"""

from __future__ import annotations

import importlib
import re
from typing import Any
from urllib.parse import urlsplit

from agentkit.policy.stores.memory import IdempotencyStore
from agentkit.policy.stores.operations import OperableStore
from agentkit.policy.stores.sqlite import SQLiteIdempotencyStore

__all__ = ["SCHEMES", "open_store", "public_address", "sqlite_path"]

#: What ``open_store`` reads, as its errors list it.
SCHEMES = "memory:, sqlite:///PATH (sqlite:////ABSOLUTE/PATH) or postgresql://USER@HOST/DB"

_POSTGRES = ("postgresql", "postgres", "postgresql+psycopg")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
# A password as a key=value: a URL's query option, a libpq DSN.
_KEY_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^&\s]*)", re.IGNORECASE)


def public_address(url: str) -> str:
    """``url`` as it may be shown: every password replaced by ``***`` (the user part's, up
    to the last ``@`` before the query, even where a malformed URL has a ``/`` or an ``@`` in
    its password, and any ``password=`` option)."""
    text = str(url)
    start = text.find("//")
    if start >= 0:
        cut = [i for i in (text.find(c, start + 2) for c in "?#") if i >= 0]
        end = min(cut) if cut else len(text)
        at = text.rfind("@", start + 2, end)
        colon = text.find(":", start + 2, at)
        if at >= 0 and colon >= 0:
            text = text[:colon + 1] + "***" + text[at:]
    return _KEY_PASSWORD.sub(r"\1***", text)


def open_store(url: str, **options: Any) -> OperableStore:
    """The store ``url`` names (see the module docstring), made with ``options``.

    Raises ``ValueError`` for a URL that names no store (the message names its scheme and
    shows the URL without its password), ``ImportError`` for ``postgresql://`` without the
    ``postgres`` extra, and what the store's constructor raises (``StoreError`` for a file
    SQLite cannot use; a PostgreSQL store connects on first use).
    """
    if not isinstance(url, str):
        raise TypeError(f"a store URL is a str, not {type(url).__name__}")
    found = _SCHEME.match(url)
    if found is None:
        hint = f"; for a file, write sqlite:///{public_address(url)}" if url.strip() else ""
        raise ValueError(f"{public_address(url)!r} is not a store URL (no scheme){hint};"
                         f" agentkit reads {SCHEMES}")
    scheme = found.group(1).lower()
    rest = url[found.end():]
    if scheme == "memory":
        if rest not in ("", "//"):
            raise ValueError(f"{public_address(url)!r}: a memory store has no path; write memory:")
        return IdempotencyStore(**options)
    if scheme == "sqlite":
        return SQLiteIdempotencyStore(sqlite_path(url), **options)
    if scheme in _POSTGRES:
        dsn = "postgresql:" + rest
        _check_postgres(url, dsn)
        module = importlib.import_module("agentkit.policy.stores.postgres")
        store: OperableStore = module.PostgresIdempotencyStore(dsn, **options)
        return store
    raise ValueError(f"unknown store scheme {scheme!r} in {public_address(url)!r};"
                     f" agentkit reads {SCHEMES}")


def sqlite_path(url: str) -> str:
    """The file an ``sqlite:`` URL names, as SQLAlchemy reads it: everything after the third
    slash (``sqlite:///a.db`` is ``a.db``, ``sqlite:////srv/a.db`` is ``/srv/a.db``).
    Raises ``ValueError`` for a URL that names no file."""
    shown = public_address(url)
    scheme, _, rest = url.partition(":")
    if scheme.lower() != "sqlite":
        raise ValueError(f"{shown!r} is not an sqlite: URL")
    if not rest.startswith("//"):
        raise ValueError(f"{shown!r}: write sqlite:///relative/path or sqlite:////absolute/path")
    host, slash, path = rest[2:].partition("/")
    if host:
        raise ValueError(f"{shown!r}: an SQLite store is a file on this machine, not on host"
                         f" {host!r}; write sqlite:///relative/path or sqlite:////absolute/path")
    if "?" in path or "#" in path:
        raise ValueError(f"{shown!r}: an SQLite store URL takes no query; give settings as"
                         " keywords")
    if not slash or not path or path == ":memory:":
        raise ValueError(f"{shown!r}: an SQLite store needs a file path (for a store in"
                         " memory, write memory:)")
    return path


def _check_postgres(url: str, dsn: str) -> None:
    """Refuse at once a PostgreSQL URL libpq cannot read (without the driver, the store's
    constructor says what to install)."""
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        return
    try:
        conninfo_to_dict(dsn)
    except Exception as exc:  # psycopg.ProgrammingError: libpq's own words
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        try:
            password = urlsplit(dsn).password
        except ValueError:
            password = None
        if password:
            reason = reason.replace(password, "***")
        raise ValueError(f"{public_address(url)!r}: not a PostgreSQL URL libpq can read"
                         f" ({public_address(reason)})") from None
