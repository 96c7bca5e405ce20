"""``python -m agentkit desk``: open the store and the registry, print the login URL, serve.

The desk listens on the loopback (127.0.0.1) unless ``--host`` says otherwise; there, only
``Host`` headers naming the loopback are served (a page of another site that rebinds its
name to 127.0.0.1 is refused). It prints one line with the URL and its login token (a new
random one each start, unless ``--token`` or ``$AGENTKIT_DESK_TOKEN`` gives one), then logs
each request on stderr. Every failure to start is one line and exit status 2.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import secrets
import socket
import sys
from typing import TYPE_CHECKING
from urllib.parse import quote

if TYPE_CHECKING:
    from agentkit.policy.runner import ToolRunner

__all__ = ["TOKEN_ENV", "desk_problem", "login_token", "loopback_hosts", "run_desk"]

#: The environment variable that may give the login token (a script starting the desk).
TOKEN_ENV = "AGENTKIT_DESK_TOKEN"


def loopback_hosts(host: str, port: int) -> list[str] | None:
    """The ``Host`` headers the desk serves when it listens on ``host``: the loopback's
    names for a loopback address, None (any) otherwise."""
    try:
        loopback = ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        return None
    return ["127.0.0.1", "localhost", "[::1]", "::1", host]


def desk_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the ``desk`` command's own options (before any store is opened),
    as one line, or None."""
    from agentkit.faces.desk.auth import name_problem
    from agentkit.policy.stores.audit import SIGNING_KEY_ENV, env_signer

    if args.approver is not None and name_problem(args.approver):
        return f"--approver: {name_problem(args.approver)}"
    if len(login_token(args)) < 16:
        return "the login token must have at least 16 characters"
    try:
        env_signer()
    except (ValueError, ImportError) as exc:
        return f"${SIGNING_KEY_ENV}: {exc}"
    return None


def login_token(args: argparse.Namespace) -> str:
    """``--token``, else ``$AGENTKIT_DESK_TOKEN``, else a new random one (kept on ``args``)."""
    if not getattr(args, "token", None):
        args.token = os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(24)
    return str(args.token)


def run_desk(args: argparse.Namespace, runner: ToolRunner) -> int:
    """Serve the desk for ``runner`` (the ``desk`` command once the CLI opened the store and
    the registry: :func:`agentkit.faces.cli.workspace_runner`); returns its exit status.
    The runner's store is closed when the desk stops."""
    import logging

    import uvicorn

    from agentkit.faces.desk.app import create_app
    from agentkit.policy.stores.audit import env_signer

    command = "agentkit desk"
    token = login_token(args)
    signer = env_signer()
    store = runner.store
    name = getattr(store, "address", None) or getattr(store, "path", None) or repr(store)
    unknown = [tool for tool in args.four_eyes if runner.registry.get(tool) is None]
    if unknown:
        print(f"{command}: --four-eyes: not in the loaded registry: {', '.join(unknown)}",
              file=sys.stderr)
        store.close()
        return 2
    dbos = args.dbos_system_database or os.environ.get("DBOS_SYSTEM_DATABASE_URL") or None
    app = create_app(runner, token=token, approver=args.approver, four_eyes=args.four_eyes,
                     dbos_system_database=dbos, store_name=str(name),
                     allowed_hosts=loopback_hosts(args.host, args.port))
    try:
        sock = _bind(args.host, args.port)
    except OSError as exc:
        print(f"{command}: cannot listen on {args.host}:{args.port}"
              f" ({(exc.strerror or str(exc)).lower()})", file=sys.stderr)
        store.close()
        return 2
    port = sock.getsockname()[1]
    shown_host = f"[{args.host}]" if ":" in args.host else args.host
    if args.host in ("0.0.0.0", "::"):
        shown_host = "127.0.0.1"
        print(f"{command}: listening on every interface ({args.host}): anyone who can reach"
              " this machine and has the URL can decide", file=sys.stderr)
    signed = f"; audit entries signed by {signer.key_id}" if signer is not None else ""
    print(f"{command}: store {name}; {len(runner.registry.names())} tools{signed}",
          file=sys.stderr)
    print(f"http://{shown_host}:{port}/login?token={quote(token)}", flush=True)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
        store.close()
    return 0


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock
