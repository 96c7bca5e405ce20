"""The registry served over the Model Context Protocol, with the whole policy applied.

MCP gives a host a tool list and a ``tools/call`` method; it applies no side-effect policy of
its own (``ToolAnnotations`` are hints a client must not trust, and a request carries no
idempotency key). This module puts a :class:`~agentkit.policy.runner.ToolRunner` behind the
official SDK's low-level server, so every MCP host gets the same stable codes, retries,
idempotency, budget and approvals as the notebooks:

- ``tools/list`` is ``registry.describe("mcp")``: the registry's own JSON Schemas (no second
  schema) and the annotations derived from each tool's effect;
- ``tools/call`` goes through ``runner.acall``. Its ``structuredContent`` is the runner's whole
  result dict; a success's text is ``data``; a failure has ``isError: true`` and the dict's JSON
  as its text. Nothing a client sends produces a stack trace or a JSON-RPC internal error.

Approvals: the model never approves itself. No tool, method or argument settles an approval.
By default (``approvals="cli"``) an irreversible call returns ``approval_required`` with its
id, and a person settles it out of band (``python -m agentkit approvals approve ID``); asking
again with the same intent then returns the settled result, ``replayed: true``. With
``approvals="elicit"``, when the client declares the *elicitation* capability, an
irreversible call is answered with an elicitation the host shows its user ("Approve
send_message …?"): on protocol 2026-07-28 as an ``InputRequiredResult`` (SEP-2322) whose
``request_state`` is sealed with an HMAC (a secret kept in the workspace) over the exact
tool, arguments and approval id; on older protocols as an ``elicitation/create`` request
within the call. Accept runs the write once; decline or cancel settles it ``forbidden``. That
trusts the host to show the question to a person: an agent client may answer by itself.

By the spec (2025-11-25): ``serverInfo.version`` is the kit's version; a call of a tool that
does not exist is a JSON-RPC error (``-32602``), while everything the policy decides about a
real tool is a result. The server declares ``logging``: what is logged inside a call (the
kit's own lines: a retry, a status lookup asked, an approval asked; and the handler's, through
Python ``logging``) reaches that call's client at or above the level its session set
(:mod:`agentkit.faces.mcp_logging`); a request with a ``progressToken`` gets
``notifications/progress`` from the kit's own steps (:mod:`agentkit.faces.mcp_progress`) and
from the handler (``current_call().report_progress(...)``), through the call's own channel
(:mod:`agentkit.faces.mcp_channel`), never another session's.

Transports: :func:`serve_stdio` here; streamable HTTP with a token in
:mod:`agentkit.faces.mcp_http`.

Conversations: a call runs under the task id its ``_meta`` names (``"agentkit/task_id"``,
:data:`TASK_META`), with its own keys and approvals, else under the server runner's own
(``serve-mcp --task-id``, default ``"mcp"``: one task for every conversation of the host, so
the same content-addressed write asked in two conversations runs once and the second is
answered ``replayed``).

Needs the optional extra ``mcp`` (``pip install 'agentkit[mcp]'``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import hmac
import io
import json
import logging
import os
import re
import secrets
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from agentkit.boundary.call_info import progress_sink
from agentkit.boundary.canonical import approval_text, canonical_json, escape_invisible
from agentkit.boundary.errors import ErrorCode, failure
from agentkit.boundary.registry import ToolRegistry
from agentkit.faces import mcp_logging
from agentkit.faces.mcp_channel import CallChannel, LogLine, ProgressStep, current_channel
from agentkit.faces.mcp_progress import watch
from agentkit.policy.runner import ToolRunner

__all__ = ["APPROVAL_INPUT", "MAX_TASK_ID_CHARS", "TASK_META", "WIRE_DEPTH", "RequestStateSeal",
           "call_result", "kit_version", "load_secret", "make_server", "mcp_tools", "serve_stdio",
           "task_id_problem"]

log = logging.getLogger("agentkit")

#: The key of the approval elicitation in ``InputRequiredResult.input_requests``.
APPROVAL_INPUT = "agentkit.approval"

_STATE_VERSION = "ak1"

#: How deeply a JSON-RPC message read over stdio may nest. The SDK's parser gives up a little
#: deeper than this and then drops the message unanswered; the stdio reader answers it
#: instead (``invalid_arguments`` for a ``tools/call``, else a JSON-RPC error).
WIRE_DEPTH = 128

#: Who settles an irreversible call: ``"cli"`` a person through another channel (the
#: approvals CLI, a panel, the desk) only; ``"elicit"`` the client's user through an MCP
#: elicitation when the client declares it. ``"auto"`` is the old name of ``"elicit"``
#: (deprecated: a warning is logged).
Approvals = Literal["cli", "elicit", "auto"]

#: The key of a call's ``_meta`` naming the conversation (task) it belongs to.
TASK_META = "agentkit/task_id"
#: The longest task id a call may name.
MAX_TASK_ID_CHARS = 200


def kit_version() -> str:
    """The installed kit's version (``serverInfo.version``): the distribution
    ``agentkit-boundary``'s (PyPI's ``agentkit`` is another project)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agentkit-boundary")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


def task_id_problem(task_id: Any) -> str | None:
    """Why ``task_id`` cannot name a task (a short text that never echoes it), else None: it
    must be a str of 1 to :data:`MAX_TASK_ID_CHARS` printable characters (no control,
    format or line-breaking character)."""
    if not isinstance(task_id, str) or not task_id or len(task_id) > MAX_TASK_ID_CHARS:
        return f"a task id is a string of 1 to {MAX_TASK_ID_CHARS} characters"
    if not task_id.isprintable():
        return "a task id holds no control, format or line-breaking character"
    return None


class RequestStateSeal:
    """Opaque, integrity-protected ``request_state`` for an approval elicitation.

    The token is ``ak1.<payload>.<mac>``: the payload names the approval id, the tool and the
    fingerprint of the exact arguments; the mac is HMAC-SHA256 under a secret the client never
    sees. A client can echo a token back, but cannot make one, alter one, or move one to other
    arguments: :meth:`open` returns the approval id only for the very call it was minted for.
    """

    def __init__(self, secret: bytes) -> None:
        if len(secret) < 32:
            raise ValueError("the request-state secret must be at least 32 bytes")
        self._secret = bytes(secret)

    def seal(self, approval_id: str, tool: str, arguments: Any) -> str:
        payload = canonical_json({"a": approval_id, "t": tool, "f": _digest(arguments)})
        body = _b64(payload.encode("utf-8"))
        return f"{_STATE_VERSION}.{body}.{self._mac(body)}"

    def open(self, token: Any, tool: str, arguments: Any) -> str | None:
        """The approval id sealed in ``token`` for exactly ``tool`` and ``arguments``, else None."""
        if not isinstance(token, str) or token.count(".") != 2:
            return None
        version, body, mac = token.split(".")
        if version != _STATE_VERSION or not hmac.compare_digest(mac, self._mac(body)):
            return None
        try:
            claims = json.loads(_unb64(body))
        except (ValueError, binascii.Error):
            return None
        if not isinstance(claims, dict) or claims.get("t") != tool:
            return None
        if not hmac.compare_digest(str(claims.get("f")), _digest(arguments)):
            return None
        approval_id = claims.get("a")
        return approval_id if isinstance(approval_id, str) else None

    def _mac(self, body: str) -> str:
        return _b64(hmac.new(self._secret, f"{_STATE_VERSION}.{body}".encode(), hashlib.sha256).digest())


def load_secret(path: str | Path) -> bytes:
    """The server's request-state secret, kept in a file readable by its owner only.

    Created (32 random bytes, mode 0600, never overwritten) on first use, so a restarted server
    still recognises the elicitations it sent before the restart.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        secret = target.read_bytes()
        if len(secret) < 32:
            raise ValueError(f"{target}: the secret file is too short; delete it to make a new one") from None
        return secret
    try:
        os.write(fd, secrets.token_bytes(32))
        os.fsync(fd)
    finally:
        os.close(fd)
    return target.read_bytes()


def mcp_tools(registry: ToolRegistry) -> list[types.Tool]:
    """The ``tools/list`` entries: ``registry.describe("mcp")`` as the SDK's own types."""
    return [types.Tool.model_validate(entry) for entry in registry.describe("mcp")]


def call_result(result: Mapping[str, Any]) -> types.CallToolResult:
    """A runner result as an MCP tool result: all of it structured, ``data`` or JSON as text."""
    structured = dict(result)
    if structured.get("ok"):
        text = str(structured.get("data", ""))
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], structured_content=structured
        )
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(structured, ensure_ascii=False))],
        structured_content=structured,
        is_error=True,
    )


def make_server(
    runner: ToolRunner, *, secret: bytes | None = None, name: str = "agentkit",
    approvals: Approvals = "cli", runner_for: Callable[[str], ToolRunner] | None = None,
) -> Server[Any]:
    """A low-level MCP server over ``runner``'s registry, applying its policy to every call.

    ``secret`` seals the elicitation ``request_state`` (see :class:`RequestStateSeal`); without
    one a fresh random secret is used, good for this process only. ``approvals``: ``"cli"``
    (the default) never elicits, so an irreversible call stays ``approval_required`` until a
    person settles it with the approvals CLI (or a panel) on the same store, and an
    elicitation answer a client sends is not taken; ``"elicit"`` asks the client's user
    through an elicitation when the client declares it, trusting the host to show it to a
    person (an agent client may answer elicitations by itself). ``"auto"`` is the old name
    of ``"elicit"``.

    A call whose ``_meta`` names a task (:data:`TASK_META`) runs under that task id: its own
    keys and approvals. ``runner_for(task_id)`` makes that task's runner (kept for later
    calls, the last 1,024); by default it is ``runner.for_task(task_id)``: everything of
    ``runner`` shared (store, budget — so a client cannot escape a budget by naming tasks —,
    backoff, sleeps, observers and trace) but the task id. Calls without one, or naming
    ``runner``'s own task id, run on ``runner``.
    """
    return _server(runner, secret=secret, name=name, approvals=approvals, refused={},
                   runner_for=runner_for)


def _server(
    runner: ToolRunner, *, secret: bytes | None, name: str, approvals: Approvals,
    refused: dict[str, str], runner_for: Callable[[str], ToolRunner] | None = None,
) -> Server[Any]:
    """:func:`make_server`; ``refused`` maps the ids of ``tools/call`` requests the stdio
    reader could not read (their arguments were dropped) to the reason: they are answered
    ``invalid_arguments`` with it and run nothing."""
    if approvals not in ("cli", "elicit", "auto"):
        raise ValueError("approvals must be 'cli' or 'elicit'")
    if approvals == "auto":
        log.warning("mcp: approvals='auto' is the old name of 'elicit' (the client's user "
                    "approves through an elicitation); say 'elicit', or 'cli' for a person's "
                    "channel only")
    seal = RequestStateSeal(secret if secret is not None else secrets.token_bytes(32))
    registry = runner.registry
    elicit = approvals != "cli"
    runners = _TaskRunners(runner, runner_for)
    mcp_logging.install()

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=mcp_tools(registry))

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        if registry.get(params.name) is None:  # the spec: a protocol error, not a result
            if refused:
                refused.pop(_id_key(ctx.request_id), None)
            log.info("mcp: tools/call of an unknown tool %r", escape_invisible(params.name[:64]))
            raise MCPError(code=types.INVALID_PARAMS,
                           message=f"Unknown tool: {escape_invisible(params.name[:64])}")
        channel = _channel(ctx)
        own = current_channel.set(channel)
        sink = progress_sink.set(channel.report_progress)
        try:
            result = await _call(ctx, params)
        except Exception:  # the policy never raises for client input; a bug must not either
            log.exception("mcp: tools/call %r failed inside the server", params.name[:64])
            result = call_result(failure(ErrorCode.TOOL_FAILURE))
        finally:
            progress_sink.reset(sink)
            current_channel.reset(own)
        await channel.aclose()  # the call's notifications reach its client before its result
        return result

    async def _call(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        name, arguments = params.name, params.arguments if params.arguments is not None else {}
        if refused:
            reason = refused.pop(_id_key(ctx.request_id), None)
            if reason is not None:
                return call_result(failure(ErrorCode.INVALID_ARGUMENTS, detail=reason))
        task_runner, problem = runners.of(params.meta if params.meta is not None else ctx.meta)
        if task_runner is None:
            log.info("mcp: tools/call %r: _meta %s refused: %s", name[:64], TASK_META, problem)
            return call_result(failure(ErrorCode.INVALID_ARGUMENTS,
                                       detail=f"_meta {TASK_META}: {problem}"))
        if elicit and (params.request_state is not None or params.input_responses):
            return await _answered(task_runner, params, name, arguments)
        result = await task_runner.acall(name, arguments)
        if result.get("error") != ErrorCode.APPROVAL_REQUIRED.value:
            return call_result(result)
        approval_id = str(result["approval_id"])
        if not elicit or not _can_elicit(ctx):
            return call_result(result)  # settled out of band: the approvals CLI
        message = _approval_message(name, arguments, approval_id)
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return _ask(message, seal.seal(approval_id, name, arguments))
        channel = current_channel.get()
        if channel is not None:  # "waiting for a person" reaches the client before the question
            await channel.flush()
        answer = await ctx.session.elicit_form(message, _APPROVAL_SCHEMA, ctx.request_id)
        return await _settle(task_runner, approval_id, answer.action)

    async def _answered(
        task_runner: ToolRunner, params: types.CallToolRequestParams, name: str,
        arguments: dict[str, Any],
    ) -> types.CallToolResult | types.InputRequiredResult:
        """The client's retry carrying the user's answer (SEP-2322)."""
        approval_id = seal.open(params.request_state, name, arguments)
        if approval_id is None:  # forged, altered, or minted for another call: nothing runs
            log.warning("mcp: %s: request_state refused (not ours, or not for these arguments)",
                        name[:64])
            return call_result(failure(ErrorCode.FORBIDDEN))
        answer = (params.input_responses or {}).get(APPROVAL_INPUT)
        if not isinstance(answer, types.ElicitResult):  # no answer yet: ask again
            message = _approval_message(name, arguments, approval_id)
            return _ask(message, seal.seal(approval_id, name, arguments))
        return await _settle(task_runner, approval_id, answer.action)

    async def _settle(task_runner: ToolRunner, approval_id: str, action: str) -> types.CallToolResult:
        if action == "accept":
            return call_result(await task_runner.aapprove(approval_id))
        return call_result(await task_runner.adeny(approval_id))  # decline or cancel

    async def set_level(
        ctx: ServerRequestContext[Any], params: types.SetLevelRequestParams
    ) -> types.EmptyResult:
        mcp_logging.set_level(ctx, params.level)
        return types.EmptyResult()

    server: Server[Any] = Server(name, version=kit_version(), on_list_tools=list_tools,
                                 on_call_tool=call_tool)
    # (not Server(on_set_logging_level=...): the SDK warns that 2026-07-28 drops the method,
    # which older clients still send; registered like this, it is declared all the same)
    server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_level)
    return server


def _channel(ctx: ServerRequestContext[Any]) -> CallChannel:
    """The channel of one ``tools/call`` back to its own client."""

    async def send(item: LogLine | ProgressStep) -> None:
        if isinstance(item, LogLine):
            await ctx.session.send_notification(
                types.LoggingMessageNotification(params=types.LoggingMessageNotificationParams(
                    level=item.level, logger=item.logger, data=item.data)),  # type: ignore[arg-type]
                related_request_id=ctx.request_id)
        else:
            await ctx.session.report_progress(item.progress, item.total, item.message)

    # Progress is always handed on: the SDK sends it only for a request that carried a
    # progressToken (the in-memory transport carries a callback instead, unseen here).
    return CallChannel(asyncio.get_running_loop(), send, levels=mcp_logging.call_levels(ctx),
                       progress=True)


async def serve_stdio(
    runner: ToolRunner, *, secret: bytes | None = None, approvals: Approvals = "cli",
    runner_for: Callable[[str], ToolRunner] | None = None,
) -> None:
    """Serve ``runner`` over stdin/stdout until the client closes the stream (a coroutine:
    ``asyncio.run(serve_stdio(runner, secret=load_secret(path)))``). ``approvals`` and
    ``runner_for`` are :func:`make_server`'s.

    While it serves, file descriptor 1 points at stderr (the SDK's ``stdio_server``) and
    descriptor 0 at the null device, so a stray ``print`` or ``input`` in a handler cannot
    touch the protocol stream. Every request with an id gets an answer: one nested deeper
    than :data:`WIRE_DEPTH` (which the SDK's reader would drop) is answered here.
    """
    from mcp.server.stdio import stdio_server

    refused: dict[str, str] = {}
    server = _server(runner, secret=secret, name="agentkit", approvals=approvals, refused=refused,
                     runner_for=runner_for)
    async with _stdin_lines(refused) as stdin, stdio_server(stdin=stdin) as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


@contextlib.asynccontextmanager
async def _stdin_lines(refused: dict[str, str]) -> AsyncIterator[Any]:
    """The protocol's input, read from a private copy of descriptor 0 (which points at the
    null device meanwhile), each line passed through :func:`guard_line`."""
    import anyio

    try:
        private = os.dup(0)
    except OSError:  # no descriptor 0 at all: the SDK reads sys.stdin, unguarded
        yield None
        return
    try:
        quiet = os.open(os.devnull, os.O_RDONLY)
        os.dup2(quiet, 0)
        os.close(quiet)
    except OSError:  # cannot divert: read descriptor 0 itself
        os.close(private)
        private = -1
    wire = io.TextIOWrapper(
        os.fdopen(max(private, 0), "rb", closefd=False),
        encoding="utf-8", errors="replace",
    )
    try:
        yield _GuardedLines(anyio.wrap_file(wire), refused)
    finally:
        with contextlib.suppress(ValueError):
            wire.detach()
        if private >= 0:
            with contextlib.suppress(OSError):
                os.dup2(private, 0)  # (never closed: a reader thread may still block on it)


class _GuardedLines:
    """Lines of an async text file, each passed through :func:`guard_line`."""

    def __init__(self, source: Any, refused: dict[str, str]) -> None:
        self._source = source
        self._refused = refused

    async def __aiter__(self) -> AsyncIterator[str]:
        async for line in self._source:
            yield guard_line(line, self._refused)


#: A string (its closing quote optional, so an unclosed one ends the line in one step), or a
#: bracket, colon or comma.
_WIRE_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}:,]')
_WIRE_SCALAR = re.compile(r'\s*("(?:[^"\\]|\\.)*"|[^,}\]\s]+)')


def guard_line(line: str, refused: dict[str, str], limit: int = WIRE_DEPTH) -> str:
    """``line`` as the SDK should read it. A JSON-RPC request the SDK's parser cannot read
    (nested deeper than ``limit``, or holding a number too long for it), which it would drop
    so that its client waits forever, becomes one the server answers: a ``tools/call`` whose
    only unreadable part is its arguments keeps its id, name and metadata, loses its
    arguments, and its id goes into ``refused`` with the reason (answered
    ``invalid_arguments``, nothing runs); any other request becomes a call of an unknown
    method (a JSON-RPC error with its id). A message without a readable id is passed on
    (nothing can answer it). Linear in the line; a line with few brackets and no long
    number is not even looked at."""
    deep = line.count("{") + line.count("[") > limit
    if not deep and _LONG_NUMBER.search(line) is None:
        return line
    if _readable(line):
        return line
    depth = deepest = 0
    keys: list[str | None] = [None]
    last_string = ""
    top: dict[str, str] = {}
    arguments: tuple[int, int] | None = None
    opened_at = -1
    for token in _WIRE_TOKEN.finditer(line):
        char = line[token.start()]
        if char == '"':
            last_string = token.group()
        elif char == ":":
            if depth in (1, 2):
                try:
                    key = json.loads(last_string)
                except ValueError:
                    key = None
                keys[depth] = key if isinstance(key, str) else None
                if depth == 1 and key in ("id", "method"):
                    value = _WIRE_SCALAR.match(line, token.end())
                    if value is not None:
                        top[str(key)] = value.group(1)
        elif char in "{[":
            depth += 1
            keys.append(None)
            deepest = max(deepest, depth)
            if depth == 3 and opened_at < 0 and keys[1] == "params" and keys[2] == "arguments":
                opened_at = token.start()
        elif char in "}]":
            if depth == 3 and opened_at >= 0 and arguments is None:
                arguments = (opened_at, token.end())
            keys.pop()
            depth -= 1
            if depth < 0:
                return line
        elif char == "," and depth in (1, 2):
            keys[depth] = None
    if "id" not in top:
        return line
    try:
        request_id = json.loads(top["id"])
    except ValueError:  # (an id Python cannot read either: nothing to answer it with)
        return line
    if not isinstance(request_id, (int, str)) or isinstance(request_id, bool):
        return line
    reason = (f"the request nests deeper than {limit} levels; the server did not read it"
              if deepest > limit else
              "the request holds a number too long to read; the server did not read it")
    log.warning("mcp: request %s cannot be read (%s); answered without reading it",
                escape_invisible(top["id"][:64]), reason.split(";")[0])
    if top.get("method") == '"tools/call"' and arguments is not None:
        rewritten = line[:arguments[0]] + "{}" + line[arguments[1]:]
        if _readable(rewritten):
            refused[_id_key(request_id)] = reason
            return rewritten
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "agentkit/unreadable-request"})


#: A run of digits longer than Python (and the SDK's parser) turns into a number by default.
_LONG_NUMBER = re.compile(r"(?<![0-9])[0-9]{4300}")


def _readable(line: str) -> bool:
    try:
        types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except Exception:
        return False
    return True


def _id_key(request_id: Any) -> str:
    return json.dumps(request_id)


# --------------------------------------------------------------------------- helpers


class _TaskRunners:
    """The runner of each conversation (task id) a call's ``_meta`` names: ``base`` for its
    own task id and for calls naming none; any other made once by ``make`` (the last
    :attr:`KEEP` kept; one made again later has the same keys and approvals, which live in
    the store)."""

    KEEP = 1024

    def __init__(self, base: ToolRunner, make: Callable[[str], ToolRunner] | None) -> None:
        self.base = watch(base)
        self.make = make if make is not None else self._twin
        self._runners: OrderedDict[str, ToolRunner] = OrderedDict()

    def of(self, meta: Mapping[str, Any] | None) -> tuple[ToolRunner | None, str | None]:
        """The runner for a call with this ``_meta``, or None and why its task id is refused."""
        if not isinstance(meta, Mapping) or TASK_META not in meta:
            return self.base, None
        task_id = meta[TASK_META]
        problem = task_id_problem(task_id)
        if problem is not None:
            return None, problem
        if task_id == self.base.context.task_id:
            return self.base, None
        runner = self._runners.get(task_id)
        if runner is None:  # (one event loop: no other call runs between the get and the set)
            runner = self._runners[task_id] = watch(self.make(task_id))
            while len(self._runners) > self.KEEP:
                self._runners.popitem(last=False)
        self._runners.move_to_end(task_id)
        return runner, None

    def _twin(self, task_id: str) -> ToolRunner:
        return self.base.for_task(task_id)

_APPROVAL_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


def _ask(message: str, state: str) -> types.InputRequiredResult:
    request = types.ElicitRequest(
        params=types.ElicitRequestFormParams(message=message, requested_schema=_APPROVAL_SCHEMA)
    )
    return types.InputRequiredResult(input_requests={APPROVAL_INPUT: request}, request_state=state)


def _approval_message(tool: str, arguments: dict[str, Any], approval_id: str) -> str:
    """What the host shows its user: the tool and the whole arguments, never cut, exactly as
    they will run, with every invisible or reordering character escaped
    (:func:`approval_text`, the text ``agentkit approvals list`` shows too)."""
    return (
        f"Approve {escape_invisible(tool)} with {approval_text(arguments)}? It cannot be undone. "
        f"Accept runs it once; decline refuses it. (approval {approval_id})"
    )


def _can_elicit(ctx: ServerRequestContext[Any]) -> bool:
    """Whether this request's client declared form elicitation (per request on 2026-07-28)."""
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        meta = ctx.meta or {}
        declared = meta.get(types.CLIENT_CAPABILITIES_META_KEY)
        if not isinstance(declared, Mapping):
            return False
        elicitation = declared.get("elicitation")
        # An empty object means form mode (the spec's backwards-compatible default).
        return isinstance(elicitation, Mapping) and (not elicitation or "form" in elicitation)
    capabilities = ctx.session.client_capabilities
    if capabilities is None or capabilities.elicitation is None:
        return False
    elicitation = capabilities.elicitation
    return elicitation.form is not None or elicitation.url is None


def _digest(arguments: Any) -> str:
    # surrogatepass: a lone surrogate sent by a client must still digest (and then not match).
    return hashlib.sha256(canonical_json(arguments).encode("utf-8", "surrogatepass")).hexdigest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
