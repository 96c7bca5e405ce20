"""The MCP server's ``logging`` capability: what is logged inside a call reaches that call's
client, at or above the level its session set.

- ``logging/setLevel`` (:func:`set_level`) sets the level of the client's own session (its
  connection), default :data:`DEFAULT_LEVEL`; on protocol 2026-07-28, where that method is
  gone, each request names its own level in its ``_meta`` and the SDK's rule applies.
- :class:`CallLogHandler`, one handler on the root logger (:func:`install`), hands every
  record logged inside a ``tools/call`` to that call's
  :class:`~agentkit.faces.mcp_channel.CallChannel`: the kit's lines logged inside the call
  (an invalid argument, a transient failure) and the handler's own, through Python
  ``logging`` on its worker thread. (The kit's steps, a retry, a status lookup asked, an
  approval asked, are sent whatever the logging configuration:
  :mod:`agentkit.faces.mcp_progress`.) The record's context says which call (the
  worker runs with the caller's copied context), so a line never reaches another session.
  A record outside any call costs one context-variable read.

The client gets the record's message (``record.getMessage()``, invisible characters escaped,
at most :data:`MAX_LOG_CHARS`), never its traceback (that stays in the operator's log), with
the logger's name. A record must pass its logger's own level first (``serve-mcp`` lets every
record through to this handler and keeps ``--log-level`` for stderr).
"""

from __future__ import annotations

import logging
from typing import Any, get_args

from mcp import types
from mcp.server.connection import allowed_log_levels
from mcp.server.context import ServerRequestContext

from agentkit.boundary.canonical import escape_invisible
from agentkit.faces.mcp_channel import SENT, current_channel

__all__ = ["DEFAULT_LEVEL", "LEVELS", "MAX_LOG_CHARS", "CallLogHandler", "call_levels",
           "install", "mcp_level", "set_level"]

#: The MCP levels, least severe first (RFC 5424's, as the spec lists them).
LEVELS: tuple[str, ...] = get_args(types.LoggingLevel)
#: A session's level until its client sends ``logging/setLevel``.
DEFAULT_LEVEL = "info"
#: The longest text a log line sends (the rest is cut, with a mark).
MAX_LOG_CHARS = 4000
#: Where a session's level is kept in its connection's per-connection state.
_STATE_KEY = "agentkit.log_level"
#: Loggers whose records are the transport's own chatter, not the call's.
_QUIET = ("mcp", "mcp_types", "httpx", "httpcore", "anyio", "uvicorn", "sse_starlette")


def mcp_level(levelno: int) -> str:
    """The MCP level of a Python logging level (NOTICE between INFO and WARNING)."""
    if levelno < logging.INFO:
        return "debug"
    if levelno < 25:
        return "info"
    if levelno < logging.WARNING:
        return "notice"
    if levelno < logging.ERROR:
        return "warning"
    if levelno < logging.CRITICAL:
        return "error"
    return "critical"


def _state(ctx: ServerRequestContext[Any]) -> dict[str, Any] | None:
    """The per-connection state of the request's connection (``Connection.state``, which
    the SDK's ``Context.connection`` exposes; the low-level server's request context reaches
    it through its session only), or None when this SDK keeps it elsewhere."""
    connection = getattr(ctx.session, "_connection", None)
    state = getattr(connection, "state", None)
    return state if isinstance(state, dict) else None


def set_level(ctx: ServerRequestContext[Any], level: str) -> None:
    """``logging/setLevel``: this session's calls send lines at ``level`` and above."""
    state = _state(ctx)
    if state is not None:
        state[_STATE_KEY] = level


def call_levels(ctx: ServerRequestContext[Any]) -> frozenset[str]:
    """The levels a ``tools/call`` may send: on 2026-07-28 those its own ``_meta`` asked for
    (the SDK's rule), else its session's level and above."""
    allowed = allowed_log_levels(ctx.protocol_version, ctx.meta)
    state = _state(ctx)
    chosen = state.get(_STATE_KEY, DEFAULT_LEVEL) if state is not None else DEFAULT_LEVEL
    floor = LEVELS.index(chosen) if chosen in LEVELS else LEVELS.index(DEFAULT_LEVEL)
    return frozenset(level for level in LEVELS[floor:] if level in allowed)


class CallLogHandler(logging.Handler):
    """Hands each record logged inside a ``tools/call`` to that call's channel."""

    def emit(self, record: logging.LogRecord) -> None:
        channel = current_channel.get()
        if channel is None or record.name.split(".", 1)[0] in _QUIET or hasattr(record, SENT):
            return
        level = mcp_level(record.levelno)
        if level not in channel.levels:
            return
        try:
            text = escape_invisible(record.getMessage())
        except Exception:  # a record that cannot be formatted: logging's own rule, quietly
            return
        if len(text) > MAX_LOG_CHARS:
            text = text[:MAX_LOG_CHARS] + " …(cut)"
        channel.log(level, record.name, text)


_installed: CallLogHandler | None = None


def install() -> CallLogHandler:
    """Put the one :class:`CallLogHandler` on the root logger (once per process)."""
    global _installed
    if _installed is None:
        _installed = CallLogHandler(logging.NOTSET)
        logging.getLogger().addHandler(_installed)
    return _installed
