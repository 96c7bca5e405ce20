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
When the client declares the *elicitation* capability, an irreversible call is answered with an
elicitation the host shows its user ("Approve send_message …?"): on protocol 2026-07-28 as an
``InputRequiredResult`` (SEP-2322) whose ``request_state`` is sealed with an HMAC (a secret kept
in the workspace) over the exact tool, arguments and approval id; on older protocols as an
``elicitation/create`` request within the call. Accept runs the write once; decline or cancel
settles it ``forbidden``. Without elicitation the call returns ``approval_required`` with its
id, and a person settles it out of band (``python -m agentkit approvals approve ID``); asking
again with the same intent then returns the settled result, ``replayed: true``.

Needs the optional extra ``mcp`` (``pip install 'agentkit[mcp]'``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from agentkit.boundary.canonical import canonical_json
from agentkit.boundary.errors import ErrorCode, failure
from agentkit.boundary.registry import ToolRegistry
from agentkit.policy.runner import ToolRunner

__all__ = ["APPROVAL_INPUT", "RequestStateSeal", "call_result", "load_secret", "make_server",
           "mcp_tools", "serve_stdio"]

log = logging.getLogger("agentkit")

#: The key of the approval elicitation in ``InputRequiredResult.input_requests``.
APPROVAL_INPUT = "agentkit.approval"

_STATE_VERSION = "ak1"


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
    runner: ToolRunner, *, secret: bytes | None = None, name: str = "agentkit"
) -> Server[Any]:
    """A low-level MCP server over ``runner``'s registry, applying its policy to every call.

    ``secret`` seals the elicitation ``request_state`` (see :class:`RequestStateSeal`); without
    one a fresh random secret is used, good for this process only.
    """
    seal = RequestStateSeal(secret if secret is not None else secrets.token_bytes(32))
    registry = runner.registry

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=mcp_tools(registry))

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        try:
            return await _call(ctx, params)
        except Exception:  # the policy never raises for client input; a bug must not either
            log.exception("mcp: tools/call %r failed inside the server", params.name[:64])
            return call_result(failure(ErrorCode.TOOL_FAILURE))

    async def _call(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        name, arguments = params.name, params.arguments if params.arguments is not None else {}
        if params.request_state is not None or params.input_responses:
            return await _answered(params, name, arguments)
        result = await runner.acall(name, arguments)
        if result.get("error") != ErrorCode.APPROVAL_REQUIRED.value:
            return call_result(result)
        approval_id = str(result["approval_id"])
        if not _can_elicit(ctx):
            return call_result(result)  # settled out of band: the approvals CLI
        message = _approval_message(name, arguments, approval_id)
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            return _ask(message, seal.seal(approval_id, name, arguments))
        answer = await ctx.session.elicit_form(message, _APPROVAL_SCHEMA, ctx.request_id)
        return await _settle(approval_id, answer.action)

    async def _answered(
        params: types.CallToolRequestParams, name: str, arguments: dict[str, Any]
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
        return await _settle(approval_id, answer.action)

    async def _settle(approval_id: str, action: str) -> types.CallToolResult:
        if action == "accept":
            return call_result(await runner.aapprove(approval_id))
        return call_result(await runner.adeny(approval_id))  # decline or cancel

    return Server(name, on_list_tools=list_tools, on_call_tool=call_tool)


async def serve_stdio(runner: ToolRunner, *, secret: bytes | None = None) -> None:
    """Serve ``runner`` over stdin/stdout until the client closes the stream.

    The SDK's ``stdio_server`` points file descriptor 1 at stderr while it serves, so a stray
    ``print`` in a handler cannot corrupt the protocol stream.
    """
    from mcp.server.stdio import stdio_server

    server = make_server(runner, secret=secret)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


# --------------------------------------------------------------------------- helpers

_APPROVAL_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


def _ask(message: str, state: str) -> types.InputRequiredResult:
    request = types.ElicitRequest(
        params=types.ElicitRequestFormParams(message=message, requested_schema=_APPROVAL_SCHEMA)
    )
    return types.InputRequiredResult(input_requests={APPROVAL_INPUT: request}, request_state=state)


def _approval_message(tool: str, arguments: dict[str, Any], approval_id: str) -> str:
    shown = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    if len(shown) > 500:
        shown = shown[:500] + "…"
    return (
        f"Approve {tool} with {shown}? It cannot be undone. "
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
