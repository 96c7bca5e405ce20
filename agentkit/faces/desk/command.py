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
from urllib.parse import quote

__all__ = ["TOKEN_ENV", "loopback_hosts", "run_desk"]

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


def run_desk(args: argparse.Namespace) -> int:
    """The ``desk`` command (see the module docstring); returns its exit status."""
    import logging

    import uvicorn

    from agentkit.faces.cli import (
        DEFAULT_WORKSPACE,
        UnusableWorkspace,
        chosen_store,
        load_registry,
        refusal,
        workspace_runner,
    )
    from agentkit.faces.desk.app import create_app
    from agentkit.faces.desk.auth import name_problem
    from agentkit.policy.stores.audit import SIGNING_KEY_ENV, env_signer

    command = "agentkit desk"
    if args.approver is not None and name_problem(args.approver):
        print(f"{command}: --approver: {name_problem(args.approver)}", file=sys.stderr)
        return 2
    token = args.token or os.environ.get(TOKEN_ENV) or secrets.token_urlsafe(24)
    if len(token) < 16:
        print(f"{command}: the login token must have at least 16 characters", file=sys.stderr)
        return 2
    try:
        signer = env_signer()
    except (ValueError, ImportError) as exc:
        print(f"{command}: ${SIGNING_KEY_ENV}: {exc}", file=sys.stderr)
        return 2
    try:
        registry = load_registry(args.registry) if args.registry else None
        runner = workspace_runner(args.workspace or DEFAULT_WORKSPACE, registry=registry,
                                  store=chosen_store(args), create=False, task_id="desk")
    except UnusableWorkspace as exc:
        print(f"{command}: {refusal(args, exc)}", file=sys.stderr)
        return 2
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
