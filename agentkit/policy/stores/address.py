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

A password is hidden as libpq reads it, and then some: libpq takes everything from the
user's ``:`` to the ``@`` as the password (``postgresql://u:Pw?s3cret@host/db`` is the
password ``Pw?s3cret``: a ``?`` or ``#`` there ends nothing), so the mask runs from that
``:`` to the *last* ``@`` (a password typed with a raw ``@`` or ``/``, which libpq misreads,
is hidden whole too), hides every ``password=`` option (also ``sslpassword``, also with a
percent-encoded name), and, where psycopg is installed, reads the masked text with libpq's
own parser (``psycopg.conninfo.conninfo_to_dict``): if libpq would still find the password
there, only the server's parts are shown. :func:`scrub` does the same for a message that
may quote the URL (libpq's and the server's errors).

The operator's commands open with :func:`open_existing_store`: the store must be there
already, with agentkit's tables; a file or database without them is refused
(``StoreError``) and nothing is created in it.
"""

from __future__ import annotations

import importlib
import os
import re
from typing import Any
from urllib.parse import unquote_plus

from agentkit.policy.stores.algorithm import StoreError
from agentkit.policy.stores.memory import IdempotencyStore
from agentkit.policy.stores.operations import OperableStore
from agentkit.policy.stores.sqlite import SQLiteIdempotencyStore, read_only_look

__all__ = ["SCHEMES", "existing_sqlite_store", "libpq_reading", "open_existing_store",
           "open_store", "public_address", "scrub", "sqlite_path"]

#: What ``open_store`` reads, as its errors list it.
SCHEMES = "memory:, sqlite:///PATH (sqlite:////ABSOLUTE/PATH) or postgresql://USER@HOST/DB"

_POSTGRES = ("postgresql", "postgres", "postgresql+psycopg")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
# An option as a key=value: a URL's query (a value ends at ``&``) or a libpq DSN's words (a
# value ends at a space); a password's is hidden whatever its name's spelling
# (``sslpassword``, ``pass%77ord``).
_OPTION_IN_URL = re.compile(r"([A-Za-z0-9_%+.-]+)(\s*=\s*)('(?:[^'\\]|\\.)*'|[^&\s]*)")
_OPTION_IN_WORDS = re.compile(r"([A-Za-z0-9_%+.-]+)(\s*=\s*)('(?:[^'\\]|\\.)*'|\S*)")
_SECRET_KEYS = ("password", "sslpassword")
_QUOTED = re.compile(r'"([^"]*)"|\'([^\']*)\'')
# Where libpq cuts a URL: a password typed with these is read in pieces (a host, a port...).
_CUTS = re.compile(r"[@/:?#&=,;\s]+")


def public_address(url: str) -> str:
    """``url`` as it may be shown: every password replaced by ``***`` (see the module
    docstring: from the user's ``:`` to the last ``@``, and every ``password=`` option),
    checked by libpq's own reading where psycopg is installed."""
    text = str(url)
    options = _OPTION_IN_URL if _SCHEME.match(text) else _OPTION_IN_WORDS
    shown = options.sub(_hide_option, _hide_user_info(text))
    secrets = [value for value in _passwords(libpq_reading(text)) if value != "***"]
    if secrets and set(_passwords(libpq_reading(shown))) & set(secrets):
        # libpq still reads the password in the masked text: show the server's parts only.
        return _server_parts(libpq_reading(text) or {})
    return shown


def libpq_reading(dsn: str) -> dict[str, str] | None:
    """What libpq reads in ``dsn`` (a URL or ``key=value`` words), or None: psycopg is not
    installed, the text names another scheme, or libpq cannot read it."""
    text = str(dsn)
    found = _SCHEME.match(text)
    if found is not None and "//" in text[:found.end() + 2]:
        if found.group(1).lower() not in _POSTGRES:
            return None
        text = "postgresql:" + text[found.end():]
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        return None
    try:
        parts = conninfo_to_dict(text)
    except Exception:  # psycopg.ProgrammingError: not a conninfo libpq can read
        return None
    return {str(key): str(value) for key, value in parts.items() if value is not None}


def scrub(message: str, dsn: str) -> str:
    """``message`` (an error of libpq or of the server about ``dsn``) without anything of
    ``dsn``'s password: the password libpq reads, the text a person may have typed as one
    (from the user's ``:`` to the last ``@``), each piece of it libpq may have read as
    something else (a host ``ss@s3cret@db``, a port), and any quoted fragment holding one
    (libpq quotes what it could not read or resolve)."""
    typed = _typed_secret(str(dsn))
    secrets = [s for s in (*_passwords(libpq_reading(dsn)), typed) if s]
    if not secrets:
        return message
    # Pieces of 3 characters or more are hidden wherever they stand; shorter ones only
    # where quoted ("p" is in every word).
    pieces = sorted({piece for secret in secrets for piece in (secret, *_CUTS.split(secret))
                     if len(piece) >= 3}, key=len, reverse=True)

    def quoted(found: re.Match[str]) -> str:
        inner = found.group(1) if found.group(1) is not None else found.group(2)
        if inner and (any(inner in secret for secret in secrets)
                      or any(piece in inner for piece in pieces)):
            return "'***'" if found.group(1) is None else '"***"'
        return found.group(0)

    text = _QUOTED.sub(quoted, message)
    for piece in pieces:
        text = text.replace(piece, "***")
    return public_address(text)


def _typed_secret(text: str) -> str:
    """The text from the user's ``:`` to the last ``@`` of a URL ("" when there is none):
    what a person typed as a password, whatever libpq makes of a raw ``@`` or ``/`` in it."""
    start = text.find("//")
    if start < 0:
        return ""
    at = text.rfind("@", start + 2)
    colon = text.find(":", start + 2, at) if at >= 0 else -1
    return text[colon + 1:at] if colon >= 0 else ""


def _hide_user_info(text: str) -> str:
    start = text.find("//")
    if start < 0:
        return text
    at = text.rfind("@", start + 2)
    colon = text.find(":", start + 2, at) if at >= 0 else -1
    return text[:colon + 1] + "***" + text[at:] if colon >= 0 else text


def _hide_option(found: re.Match[str]) -> str:
    if unquote_plus(found.group(1)).lower().endswith("password"):
        return found.group(1) + found.group(2) + "***"
    return found.group(0)


def _passwords(parts: dict[str, str] | None) -> list[str]:
    return [parts[key] for key in _SECRET_KEYS if parts and parts.get(key)]


def _server_parts(parts: dict[str, str]) -> str:
    """``postgresql://user@host:port/dbname`` from libpq's reading (never a password)."""
    user = f"{parts['user']}@" if parts.get("user") else ""
    port = parts.get("port", "")
    port = f":{port}" if port.strip(",") else ""
    return f"postgresql://{user}{parts.get('host', '')}{port}/{parts.get('dbname', '')}"


def open_store(url: str, **options: Any) -> OperableStore:
    """The store ``url`` names (see the module docstring), made with ``options``.

    Raises ``ValueError`` for a URL that names no store (the message names its scheme and
    shows the URL without its password), ``ImportError`` for ``postgresql://`` without the
    ``postgres`` extra, and what the store's constructor raises (``StoreError`` for a file
    SQLite cannot use; a PostgreSQL store connects on first use).
    """
    return _open(url, options, existing=False)


def open_existing_store(url: str, **options: Any) -> OperableStore:
    """:func:`open_store` for an operator's command (``keys``, ``approvals``): the store must
    exist already, with agentkit's tables. An SQLite file that is not there, or holds no
    agentkit tables (an empty file or database, someone else's), is refused at once with
    ``StoreError`` and left as it was; a PostgreSQL database or schema without them is
    refused on the store's first use (``StoreError``), and nothing is created in it.
    ``memory:`` is refused (``ValueError``): it would be an empty store of this process."""
    return _open(url, options, existing=True)


def existing_sqlite_store(path: str | os.PathLike[str], **options: Any) -> SQLiteIdempotencyStore:
    """The SQLite store in the file ``path``, which must already be an agentkit store: a
    missing file, one SQLite cannot read, or a database without agentkit's tables is refused
    with ``StoreError`` (one line naming the path), after a read-only look that changes
    nothing in it."""
    name = os.fspath(path)
    if not os.path.isfile(name):
        why = "not a file" if os.path.exists(name) else "no such store"
        raise StoreError(f"{name}: {why} (give an existing agentkit store)")
    version, tables = read_only_look(name, float(options.get("busy_timeout_seconds", 10.0)))
    if version == 0 and not {"results", "claims"} <= set(tables):  # release 1 had no version
        held = f"tables {tables}" if tables else "an empty database, no tables"
        raise StoreError(f"{name}: not an agentkit store ({held}); give the store a runner"
                         " or serve-mcp made")
    return SQLiteIdempotencyStore(name, **options)


def _open(url: str, options: dict[str, Any], *, existing: bool) -> OperableStore:
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
        if existing:
            raise ValueError(f"{public_address(url)}: a memory store lives in one process, so"
                             " this would be an empty one; give the store's sqlite:/// or"
                             " postgresql:// URL")
        return IdempotencyStore(**options)
    if scheme == "sqlite":
        if existing:
            return existing_sqlite_store(sqlite_path(url), **options)
        return SQLiteIdempotencyStore(sqlite_path(url), **options)
    if scheme in _POSTGRES:
        dsn = "postgresql:" + rest
        _check_postgres(url, dsn)
        module = importlib.import_module("agentkit.policy.stores.postgres")
        if existing:
            options = {**options, "create_tables": False}
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
        raise ValueError(f"{public_address(url)!r}: not a PostgreSQL URL libpq can read"
                         f" ({scrub(reason, dsn)})") from None
