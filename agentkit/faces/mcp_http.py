"""The MCP server over streamable HTTP, behind a token (docs/design.md#mcp).

``python -m agentkit serve-mcp --transport streamable-http`` serves the same server as stdio
(:func:`~agentkit.faces.mcp.make_server`: the whole policy, every flag) on the SDK's
streamable HTTP transport at ``http://HOST:PORT/mcp``:

- it binds the loopback (``127.0.0.1``) unless told otherwise, and keeps the SDK's
  DNS-rebinding protection (the ``Host`` and ``Origin`` headers must name the address it
  serves: a web page cannot reach it through a name of its own);
- every request must carry the token, as ``Authorization: Bearer TOKEN`` or the ``token``
  query parameter (compared in constant time); without it the answer is 401 and nothing
  runs. The token is ``--token``, else ``$AGENTKIT_MCP_TOKEN``, else made at start and
  printed with the address as one URL (``http://127.0.0.1:8765/mcp?token=…``), as Jupyter
  does. A host that is not the loopback is refused without a token given explicitly;
- the token never reaches the log (no access log; the query parameter is removed before the
  SDK sees the request).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import secrets
import socket
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

from mcp.server.lowlevel import Server
from mcp.server.transport_security import TransportSecuritySettings

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "MCP_PATH", "TOKEN_ENV", "TokenGate", "bind",
           "http_app", "is_loopback", "make_token", "serve_http", "server_url", "token_from",
           "token_problem"]

log = logging.getLogger("agentkit")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
MCP_PATH = "/mcp"
#: The environment variable holding the token when ``--token`` gives none.
TOKEN_ENV = "AGENTKIT_MCP_TOKEN"

_LOOPBACK_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
_LOOPBACK_ORIGINS = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]


def make_token() -> str:
    """A fresh token: 32 random bytes, URL-safe."""
    return secrets.token_urlsafe(32)


def token_problem(token: str) -> str | None:
    """Why ``token`` cannot be a token (a short text that never echoes it), else None."""
    if not token or len(token) > 1000:
        return "a token is 1 to 1,000 characters"
    if not token.isprintable() or any(char.isspace() for char in token):
        return "a token holds no space, control or invisible character"
    return None


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _is_wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return host == ""


def _netloc(host: str, port: int) -> str:
    bare = host.strip("[]")
    return f"[{bare}]:{port}" if ":" in bare else f"{bare}:{port}"


def server_url(host: str, port: int, token: str | None = None) -> str:
    """``http://HOST:PORT/mcp``, with ``?token=…`` when ``token`` is given."""
    url = f"http://{_netloc(host, port)}{MCP_PATH}"
    return url if token is None else f"{url}?token={quote(token, safe='')}"


def _security(host: str) -> TransportSecuritySettings:
    """The SDK's DNS-rebinding protection for ``host``: the loopback's names, and ``host``'s
    own; off only for a wildcard address (any name may reach it: the token stands guard)."""
    if _is_wildcard(host):
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    hosts, origins = list(_LOOPBACK_HOSTS), list(_LOOPBACK_ORIGINS)
    own = _netloc(host, 0)[: -len(":0")]
    if f"{own}:*" not in hosts:
        hosts.append(f"{own}:*")
        origins.append(f"http://{own}:*")
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                     allowed_origins=origins)


class TokenGate:
    """ASGI middleware: an HTTP request without the token is answered 401 and goes no
    further; one with it goes on without its ``token`` query parameter."""

    def __init__(self, app: Any, token: str) -> None:
        if not token:
            raise ValueError("the token must not be empty")
        self.app = app
        self._token = token.encode("utf-8")

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # the lifespan (websockets are not served)
            await self.app(scope, receive, send)
            return
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = [value for key, value in query if key == "token"]
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                scheme, _, credential = value.decode("latin-1").partition(" ")
                if scheme.lower() == "bearer":
                    given.append(credential.strip())
        # Every candidate is compared (constant time each), so timing tells nothing of which.
        matched = False
        for candidate in given:
            matched |= hmac.compare_digest(candidate.encode("utf-8", "surrogateescape"), self._token)
        if not matched:
            await _unauthorized(send)
            return
        rest = [(key, value) for key, value in query if key != "token"]
        scope = {**scope, "query_string": urlencode(rest).encode("latin-1")}
        await self.app(scope, receive, send)


async def _unauthorized(send: Any) -> None:
    body = (b'{"error": "unauthorized", "detail": "this MCP server needs its token: '
            b'Authorization: Bearer TOKEN, or ?token=TOKEN"}')
    await send({"type": "http.response.start", "status": 401, "headers": [
        (b"content-type", b"application/json"), (b"www-authenticate", b'Bearer realm="agentkit"'),
        (b"content-length", str(len(body)).encode("ascii"))]})
    await send({"type": "http.response.body", "body": body})


def http_app(server: Server[Any], *, token: str, host: str = DEFAULT_HOST) -> TokenGate:
    """The ASGI app serving ``server`` at :data:`MCP_PATH` over streamable HTTP, behind the
    token, with the DNS-rebinding protection for ``host``."""
    app = server.streamable_http_app(streamable_http_path=MCP_PATH, host=host,
                                     transport_security=_security(host))
    return TokenGate(app, token)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port`` (port 0: any free one). Raises OSError."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
        sock.set_inheritable(True)
    except BaseException:
        sock.close()
        raise
    return sock


async def serve_http(
    server: Server[Any], sock: socket.socket, *, token: str, host: str,
    ready: Callable[[int], None] | None = None,
) -> None:
    """Serve ``server`` on the bound ``sock`` until interrupted (SIGINT or SIGTERM: a clean
    stop). ``ready(port)`` is called once the socket is known, before serving."""
    import uvicorn

    app = http_app(server, token=token, host=host)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                            server_header=False)
    port = int(sock.getsockname()[1])
    if ready is not None:
        ready(port)
    await uvicorn.Server(config).serve(sockets=[sock])


def token_from(flag: str | None) -> tuple[str | None, str]:
    """The token given (``--token``, else :data:`TOKEN_ENV`) and where it came from, or
    None and ``"made"``."""
    if flag is not None:
        return flag, "--token"
    from_env = os.environ.get(TOKEN_ENV)
    if from_env is not None:
        return from_env, f"${TOKEN_ENV}"
    return None, "made"
