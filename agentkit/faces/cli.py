"""The command line: ``python -m agentkit matrix`` and ``python -m agentkit demo``.

    python -m agentkit matrix            play every cell of the failure matrix; exit 1 on a mismatch
    python -m agentkit matrix --csv F    the same, with the expectations of another CSV file
    python -m agentkit demo              the baseline transcript: the fake model's happy path
    python -m agentkit serve-mcp         serve the demo tools (or --registry yours) over MCP stdio
    python -m agentkit approvals list    the approvals waiting in a workspace (approve ID, deny ID)
    python -m agentkit approvals approve ID --dbos-workflow WF --dbos-system-database URL
                                         send the decision to the DBOS workflow that waits for it
    python -m agentkit keys list         the keys in a store (show KEY, purge, copy --to URL)

``serve-mcp``, ``approvals`` and ``keys`` use the store named by ``--store URL`` (or an SQLite
path), else the workspace's (``--workspace DIR``), else ``AGENTKIT_STORE``, else the default
workspace's. Imports are made inside each command, so ``--help`` answers at once; no command
loads pandas, so all work on a plain ``pip install`` without the notebook extras.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentkit.boundary.registry import ToolRegistry
    from agentkit.policy.runner import ToolRunner
    from agentkit.policy.stores.operations import OperableStore

DEFAULT_QUESTION = "idempotency key retry"

#: Where ``serve-mcp`` and ``approvals`` keep their state unless ``--workspace`` says otherwise:
#: ``files/`` (what the demo tools write), ``agentkit.sqlite3`` (idempotency keys, approvals)
#: and ``mcp-secret`` (the key that seals elicitation state).
DEFAULT_WORKSPACE = "~/.agentkit"
STORE_NAME = "agentkit.sqlite3"
SECRET_NAME = "mcp-secret"
#: The environment variable naming the store when no flag does (a URL, or an SQLite path).
STORE_ENV = "AGENTKIT_STORE"
#: How long a command waits for a PostgreSQL connection before it says the server is down.
POSTGRES_CONNECT_TIMEOUT_SECONDS = 5.0
STORE_HELP = (
    "the store: a URL (sqlite:///PATH, postgresql://USER@HOST/DB) or an SQLite file's path; "
    f"default: the --workspace's, else ${STORE_ENV}'s, else {DEFAULT_WORKSPACE}/{STORE_NAME}"
)
REGISTRY_HELP = (
    "your tools: a ToolRegistry, or a function returning one, as module:attribute "
    "(e.g. my_server:registry; the module is imported from the current folder); "
    "default: the demo tools writing into WORKSPACE/files"
)


class UnusableWorkspace(Exception):
    """A workspace, store or registry the command cannot use; its text is one line naming
    the path (or the name) and the reason, printed instead of a traceback."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentkit",
        description="One reliable execution boundary around every tool an LLM agent can call.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    matrix = commands.add_parser(
        "matrix",
        help="provoke every failure of the failure matrix and check it (exit 1 on a mismatch)",
        description=(
            "Play every row of the failure matrix (docs/design.md#failure-matrix) on fresh "
            "tools, counting the handler's real calls, and print the table. Exit status 0 when "
            "every cell is as expected, 1 when any is not, 2 when the CSV cannot be used."
        ),
    )
    matrix.add_argument(
        "--csv", metavar="PATH", default=None,
        help="the expectations to check (default: data/failure_matrix.csv)",
    )
    matrix.set_defaults(run=_matrix)

    demo = commands.add_parser(
        "demo",
        help="print the baseline transcript: the fake model searches, reads and answers",
        description=(
            "Run the deterministic fake model through the agent loop and the demo tools, and "
            "print the transcript: the chapter's search -> read -> answer baseline."
        ),
    )
    demo.add_argument("--question", default=DEFAULT_QUESTION,
                      help=f"what the fake model is asked (default: {DEFAULT_QUESTION!r})")
    demo.add_argument("--workspace", metavar="DIR", default=None,
                      help="where the demo tools may write (default: a temporary directory)")
    demo.set_defaults(run=_demo)

    workspace_help = f"the server's workspace (default: {DEFAULT_WORKSPACE}, or ${STORE_ENV}'s store)"
    serve = commands.add_parser(
        "serve-mcp",
        help="serve the demo tools over MCP (stdio), with the whole policy applied",
        description=(
            "Serve the demo registry to an MCP host over stdin/stdout, every call through a "
            "ToolRunner with a durable store (the workspace's SQLite file, or --store / "
            f"${STORE_ENV}). Only protocol messages go to stdout; logs go to stderr. Needs the "
            "'mcp' extra."
        ),
    )
    serve.add_argument("--workspace", metavar="DIR", default=None, help=workspace_help)
    serve.add_argument("--store", metavar="URL", default=None, help=STORE_HELP)
    serve.add_argument("--registry", metavar="MODULE:ATTRIBUTE", default=None, help=REGISTRY_HELP)
    serve.add_argument(
        "--approvals", choices=["auto", "cli"], default="auto",
        help=("who settles an irreversible call: 'auto' asks the client's user through an MCP "
              "elicitation when the client declares it (else the CLI); 'cli' never elicits, "
              "so only a person running 'agentkit approvals' on this workspace settles it "
              "(pick it when the client is an agent that could answer by itself)"),
    )
    serve.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                       help="the stderr log level (default: INFO)")
    serve.set_defaults(run=_serve_mcp)

    approvals = commands.add_parser(
        "approvals",
        help="list, approve or deny the irreversible calls waiting in a workspace",
        description=(
            "Settle, as a person, the approvals an MCP client asked for "
            "(docs/design.md#approvals: the model never approves itself). 'approve' runs the "
            "call once, here, and keeps its result in the store: the client asking again gets "
            "it with replayed: true."
        ),
    )
    approvals.add_argument("action", choices=["list", "approve", "deny"])
    approvals.add_argument("approval_id", nargs="?", metavar="ID", help="for approve and deny")
    approvals.add_argument("--workspace", metavar="DIR", default=None,
                           help=f"{workspace_help}; it must exist: nothing is created")
    approvals.add_argument("--store", metavar="URL", default=None,
                           help=STORE_HELP.replace("the store:", "an existing store:"))
    approvals.add_argument("--registry", metavar="MODULE:ATTRIBUTE", default=None,
                           help=REGISTRY_HELP + f"; needed to approve with --store or ${STORE_ENV}")
    approvals.add_argument(
        "--dbos-workflow", metavar="WORKFLOW_ID", default=None,
        help=("send the decision to this DBOS workflow, which waits for it "
              "(agentkit.faces.dbos: tools.wait_for_decision), instead of settling here: the "
              "workflow's own step then runs the call, or denies it. The approval must be "
              "pending in the store and belong to that workflow. Needs the 'dbos' extra"))
    approvals.add_argument(
        "--dbos-system-database", metavar="URL", default=None,
        help=("with --dbos-workflow: DBOS's system database, as in the application's "
              "config (sqlite:///path or postgresql://...; default: $DBOS_SYSTEM_DATABASE_URL)"))
    approvals.add_argument("--dbos-schema", metavar="NAME", default="dbos",
                           help="with --dbos-workflow: DBOS's system schema (default: dbos)")
    approvals.set_defaults(run=_approvals)

    keys = commands.add_parser(
        "keys",
        help="list, show, purge or copy the idempotency keys of a store",
        description=(
            "Look into an existing store (docs/design.md#operating-the-stores): 'list' its "
            "keys, 'show' one, 'purge' the completed keys and settled approvals past retention "
            "(never a claim, never a pending approval), 'copy' its keys and approvals into "
            "another store (--to URL) so that a write asked again there replays instead of "
            "running again. Plain text, or one JSON document with --json."
        ),
    )
    keys.add_argument("action", choices=["list", "show", "purge", "copy"])
    keys.add_argument("key", nargs="?", metavar="KEY", help="for show")
    keys.add_argument("--store", metavar="URL", default=None,
                      help=STORE_HELP.replace("the store:", "an existing store:"))
    keys.add_argument("--workspace", metavar="DIR", default=None,
                      help=f"a workspace whose store to use (default: {DEFAULT_WORKSPACE})")
    keys.add_argument("--to", metavar="URL", default=None,
                      help="for copy: the store to copy into (made if it is a new SQLite file)")
    keys.add_argument("--json", action="store_true", help="one JSON document, for scripts")
    keys.add_argument("--limit", metavar="N", type=_positive_int, default=None,
                      help="for list: show the first N keys only")
    keys.add_argument("--retention-seconds", metavar="S", type=_positive_seconds, default=None,
                      help="for purge: keep completed keys this long (default: 7 days)")
    keys.set_defaults(run=_keys)
    return parser


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def _positive_seconds(text: str) -> float:
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0: {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit status (argparse exits 2 on a usage error)."""
    args = build_parser().parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run
    return run(args)


def _matrix(args: argparse.Namespace) -> int:
    # matrix_records, not run_matrix: the command needs no pandas (a plain install has none).
    from agentkit.demo.matrix import COLUMNS, load_matrix, matrix_records

    try:
        rows = load_matrix(args.csv)
    except (OSError, ValueError) as exc:
        print(f"agentkit matrix: {exc}", file=sys.stderr)
        return 2
    records = matrix_records(rows)
    print(text_table(records, COLUMNS))
    failed = [r for r in records if not r["pass"]]
    if not failed:
        print(f"\nall {len(records)} cells as expected")
        return 0
    cells = ", ".join(f"{r['failure']} × {r['effect']}" for r in failed)
    print(f"\n{len(failed)} of {len(records)} cells differ: {cells}")
    return 1


def text_table(records: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """Records as left-aligned columns under a header line (None shows as "-")."""
    cells = [list(columns)]
    cells += [["-" if r[c] is None else str(r[c]) for c in columns] for r in records]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = ("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells)
    return "\n".join(line.rstrip() for line in lines)


def workspace_runner(
    workspace: str | os.PathLike[str],
    *,
    registry: ToolRegistry | None = None,
    store: str | os.PathLike[str] | None = None,
    create: bool = True,
) -> ToolRunner:
    """The runner ``serve-mcp`` and ``approvals`` share: ``registry`` (default: the demo tools
    writing into ``WORKSPACE/files``, where the model cannot reach the store or the secret
    beside it), a durable store (default ``WORKSPACE/agentkit.sqlite3``; ``store`` is a URL
    or an SQLite file's path, see :func:`open_command_store`), and one fixed caller context,
    so that both commands compute the same keys and approval ids for the same intent.

    ``create=False`` (the approvals CLI) opens only what exists: a folder that is not a
    workspace, or a store that is not there, is :class:`UnusableWorkspace`, and nothing is
    created. Any path or store that cannot be used is :class:`UnusableWorkspace` too, with
    one line naming the path (or the address, never a password) and the reason.
    """
    from agentkit.boundary.context import CallContext
    from agentkit.demo.tools import make_demo_registry
    from agentkit.policy.runner import ToolRunner
    from agentkit.policy.stores import StoreError

    root = Path(workspace).expanduser()
    if create:
        _make_folder(root)
    opened, _, folder = open_command_store(root, store, create=create)
    if registry is None:
        registry = make_demo_registry(folder / "files")
    context = CallContext(task_id="mcp", principal="mcp-host")
    runner = ToolRunner(registry, store=opened, context=context)
    try:  # a store that opens but cannot be read (not ours, damaged) is refused now, not later
        runner.pending_approvals()
    except StoreError as exc:
        opened.close()
        raise UnusableWorkspace(str(exc)) from None
    return runner


def is_store_url(text: str) -> bool:
    """Whether ``text`` is a store URL (``memory:``, ``sqlite:///…``, ``postgresql://…``, or
    anything with a ``scheme://``) rather than a file's path."""
    import re

    return re.match(r"^(memory:|[A-Za-z][A-Za-z0-9+.-]*://)", text) is not None


def open_command_store(
    workspace: Path, store: str | os.PathLike[str] | None, *, create: bool, **options: Any
) -> tuple[OperableStore, str, Path]:
    """The store a command uses, its name as the command shows it, and the folder beside it
    (where the demo tools write): ``store`` (a URL, or an SQLite file's path), else the
    workspace's ``agentkit.sqlite3``. ``create=False`` opens only an existing SQLite file and
    refuses ``memory:`` (an empty store of this process). A PostgreSQL store connects on its
    first call. Raises :class:`UnusableWorkspace` (one line, no password)."""
    from agentkit.policy.stores import (
        SQLiteIdempotencyStore,
        StoreError,
        open_store,
        public_address,
    )
    from agentkit.policy.stores.address import sqlite_path

    url = os.fspath(store) if store is not None and is_store_url(os.fspath(store)) else None
    if url is None:
        path = Path(store).expanduser() if store is not None else workspace / STORE_NAME
        name, folder = str(path), path.parent if store is not None else workspace
        if create:
            _make_folder(path.parent)
        else:
            _existing_store(workspace, path, given=store is not None)
    else:
        name, folder = public_address(url), workspace
        scheme = url.partition(":")[0].lower()
        if scheme == "memory" and not create:
            raise UnusableWorkspace(
                f"{url}: a memory store lives in one process, so this command would see an"
                " empty one; give the store's sqlite:/// or postgresql:// URL")
        if scheme == "sqlite":
            try:
                path = Path(sqlite_path(url))
            except ValueError as exc:
                raise UnusableWorkspace(str(exc)) from None
            folder = path.parent
            if create:
                _make_folder(path.parent)
            else:
                _existing_store(workspace, path, given=True)
        if scheme.startswith("postgres"):
            options = {"connect_timeout_seconds": POSTGRES_CONNECT_TIMEOUT_SECONDS, **options}
    try:
        opened = SQLiteIdempotencyStore(path, **options) if url is None else open_store(url, **options)
    except StoreError as exc:
        raise UnusableWorkspace(str(exc)) from None
    except ImportError as exc:
        raise UnusableWorkspace(f"{name}: {exc}") from None
    except (OSError, ValueError) as exc:
        raise UnusableWorkspace(f"{name}: {_reason(exc)}" if url is None else str(exc)) from None
    return opened, name, folder


def chosen_store(args: argparse.Namespace) -> str | None:
    """The store a command was told to use: ``--store``, else (when no ``--workspace`` names
    one) ``$AGENTKIT_STORE``; None: the workspace's own."""
    if args.store:
        return str(args.store)
    if args.workspace is None:
        return os.environ.get(STORE_ENV) or None
    return None


def refusal(args: argparse.Namespace, exc: Exception) -> str:
    """The one line for a store that cannot be used, saying when ``$AGENTKIT_STORE`` named it
    (its value is shown only as the store's own message shows it: without a password)."""
    from_env = not args.store and args.workspace is None and bool(os.environ.get(STORE_ENV))
    return f"{exc} (the store ${STORE_ENV} names)" if from_env else str(exc)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__


def _make_folder(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UnusableWorkspace(f"{folder}: not a folder (a file is in the way)") from None
    except OSError as exc:
        raise UnusableWorkspace(f"{folder}: cannot be a workspace ({_reason(exc)})") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UnusableWorkspace(f"{folder}: cannot be a workspace (not writable)")


def _existing_store(root: Path, store_path: Path, *, given: bool) -> None:
    """Refuse, without creating anything, what is not an existing store."""
    try:
        if given:
            if not store_path.is_file():
                why = "not a file" if store_path.exists() else "no such store"
                raise UnusableWorkspace(f"{store_path}: {why} (give an existing agentkit store)")
            return
        if not root.is_dir():
            why = "not a folder" if root.exists() else "no such folder"
            raise UnusableWorkspace(f"{root}: not an agentkit workspace ({why})")
        if not store_path.is_file():
            raise UnusableWorkspace(
                f"{root}: not an agentkit workspace (no {STORE_NAME}; serve-mcp makes one, "
                "or give --store PATH)")
    except OSError as exc:  # a name too long, a folder we may not look into
        raise UnusableWorkspace(f"{store_path if given else root}: {_reason(exc)}") from None


def load_registry(spec: str) -> ToolRegistry:
    """``module:attribute``: a :class:`~agentkit.ToolRegistry`, or a function (no arguments)
    returning one. The current folder is searched first, as ``python -m`` does."""
    import importlib

    from agentkit.boundary.registry import ToolRegistry

    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise UnusableWorkspace(f"--registry {spec}: write it as module:attribute")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise UnusableWorkspace(
            f"--registry {spec}: cannot import {module_name} ({type(exc).__name__}: {exc})") from None
    value: Any = module
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise UnusableWorkspace(f"--registry {spec}: {module_name} has no {attribute}") from None
    if not isinstance(value, ToolRegistry) and callable(value):
        try:
            value = value()
        except Exception as exc:
            raise UnusableWorkspace(
                f"--registry {spec}: calling it failed ({type(exc).__name__}: {exc})") from None
    if not isinstance(value, ToolRegistry):
        raise UnusableWorkspace(
            f"--registry {spec}: not a ToolRegistry (a {type(value).__name__})")
    return value


def _serve_mcp(args: argparse.Namespace) -> int:
    import asyncio
    import contextlib
    import logging

    try:
        from agentkit.faces.mcp import load_secret, serve_stdio
    except ImportError as exc:
        print(f"agentkit serve-mcp: needs the 'mcp' extra (pip install 'agentkit[mcp]'): {exc}",
              file=sys.stderr)
        return 2
    logging.basicConfig(stream=sys.stderr, level=args.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    root = Path(args.workspace or DEFAULT_WORKSPACE).expanduser()
    try:
        registry = load_registry(args.registry) if args.registry else None
        runner = workspace_runner(root, registry=registry, store=chosen_store(args))
        secret_path = root / SECRET_NAME
        try:
            secret = load_secret(secret_path)
        except (OSError, ValueError) as exc:
            raise UnusableWorkspace(f"{secret_path}: {_reason(exc)}") from None
    except UnusableWorkspace as exc:
        print(f"agentkit serve-mcp: {refusal(args, exc)}", file=sys.stderr)
        return 2
    tools = "your tools" if args.registry else "the demo tools"
    logging.getLogger("agentkit").info(
        "serving %s over stdio; workspace %s; store %s; approvals: %s", tools, root,
        getattr(runner.store, "address", None) or getattr(runner.store, "path", "in memory"),
        args.approvals)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C in a terminal: a quiet exit
        asyncio.run(serve_stdio(runner, secret=secret, approvals=args.approvals))
    return 0


def _approvals(args: argparse.Namespace) -> int:
    import json

    from agentkit.boundary.canonical import approval_text, escape_invisible
    from agentkit.policy.stores import StoreError

    command = f"agentkit approvals {args.action}"
    if args.action != "list" and not args.approval_id:
        print(f"{command}: give the approval ID", file=sys.stderr)
        return 2
    if args.dbos_workflow is not None:
        return _to_dbos(args, command)
    if args.dbos_system_database is not None or args.dbos_schema != "dbos":
        print(f"{command}: --dbos-system-database and --dbos-schema go with --dbos-workflow",
              file=sys.stderr)
        return 2
    store = chosen_store(args)
    if args.action == "approve" and store is not None and args.registry is None:
        given = "--store" if args.store else f"${STORE_ENV}"
        print(f"{command}: with {given}, give --registry MODULE:ATTRIBUTE (the tools to run)",
              file=sys.stderr)
        return 2
    try:
        registry = load_registry(args.registry) if args.registry else None
        runner = workspace_runner(args.workspace or DEFAULT_WORKSPACE, registry=registry,
                                  store=store, create=False)
    except UnusableWorkspace as exc:
        print(f"{command}: {refusal(args, exc)}", file=sys.stderr)
        return 2
    try:
        if args.action == "list":
            try:
                pending = runner.pending_approvals()
            except StoreError as exc:
                print(f"{command}: {exc}", file=sys.stderr)
                return 2
            if not pending:
                print("no pending approvals")
            for record in pending:
                print(f"{escape_invisible(record['approval_id'])}  {escape_invisible(record['tool'])}"
                      f"  {approval_text(record['arguments'])}")
            return 0
        settle = runner.approve if args.action == "approve" else runner.deny
        result = settle(args.approval_id)
    finally:
        runner.store.close()
    print(escape_invisible(json.dumps(result, ensure_ascii=False)))
    return 0 if result.get("ok") or args.action == "deny" and result.get("error") == "forbidden" else 1


def _to_dbos(args: argparse.Namespace, command: str) -> int:
    """``approve|deny ID --dbos-workflow WF``: check that the approval waits in the store for
    that workflow, then send the decision to it through DBOS (the call runs, or is denied, as
    the workflow's own step; nothing runs here)."""
    from agentkit.boundary.canonical import escape_invisible
    from agentkit.policy.stores import StoreError

    workflow_id = args.dbos_workflow
    if args.action == "list":
        print(f"{command}: --dbos-workflow goes with approve or deny", file=sys.stderr)
        return 2
    url = args.dbos_system_database or os.environ.get("DBOS_SYSTEM_DATABASE_URL", "")
    if not url:
        print(f"{command}: with --dbos-workflow, give --dbos-system-database URL (or set "
              "DBOS_SYSTEM_DATABASE_URL)", file=sys.stderr)
        return 2
    try:
        from agentkit.faces.dbos import DecisionNotSent, deliver_decision
    except ImportError as exc:
        print(f"{command}: --dbos-workflow needs the 'dbos' extra (pip install "
              f"'agentkit[dbos]'): {exc}", file=sys.stderr)
        return 2
    shown = escape_invisible(args.approval_id)
    try:
        runner = workspace_runner(args.workspace or DEFAULT_WORKSPACE, store=chosen_store(args),
                                  create=False)
    except UnusableWorkspace as exc:
        print(f"{command}: {refusal(args, exc)}", file=sys.stderr)
        return 2
    try:
        pending = {r["approval_id"]: r for r in runner.pending_approvals()}
    except StoreError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 2
    finally:
        runner.store.close()
    record = pending.get(args.approval_id)
    if record is None:
        print(f"{command}: no pending approval {shown} in the store (settled, expired, or "
              "another store)", file=sys.stderr)
        return 2
    if record["task_id"] != workflow_id:
        print(f"{command}: approval {shown} was asked by workflow "
              f"{escape_invisible(record['task_id'])}, not {escape_invisible(workflow_id)}",
              file=sys.stderr)
        return 2
    import logging

    dbos_log = logging.getLogger("dbos")
    was_disabled, dbos_log.disabled = dbos_log.disabled, True  # its errors: our one line
    try:
        deliver_decision(url, workflow_id, args.approval_id, args.action == "approve",
                         dbos_system_schema=args.dbos_schema)
    except DecisionNotSent as exc:
        print(f"{command}: {escape_invisible(str(exc))}", file=sys.stderr)
        return 2
    finally:
        dbos_log.disabled = was_disabled
    print(f"sent: {args.action} {shown} to DBOS workflow {escape_invisible(workflow_id)} "
          "(its own step settles the call)")
    return 0


def _keys(args: argparse.Namespace) -> int:
    from agentkit.faces import keys_command
    from agentkit.policy.stores import DEFAULT_RETENTION_SECONDS, StoreError, public_address

    command = f"agentkit keys {args.action}"
    misuse = None
    if args.action == "show" and not args.key:
        misuse = "give the KEY to show"
    elif args.action != "show" and args.key:
        misuse = f"{args.action} takes no KEY (did you mean: keys show KEY?)"
    elif (args.action == "copy") != (args.to is not None):
        misuse = "give --to URL, the store to copy into" if args.action == "copy" else (
            "--to is for copy")
    if misuse:
        print(f"{command}: {misuse}", file=sys.stderr)
        return 2
    retention = args.retention_seconds or DEFAULT_RETENTION_SECONDS
    workspace = Path(args.workspace or DEFAULT_WORKSPACE).expanduser()
    opened: list[OperableStore] = []
    try:
        try:
            source, name, _ = open_command_store(workspace, chosen_store(args), create=False,
                                                 retention_seconds=retention)
        except UnusableWorkspace as exc:
            raise UnusableWorkspace(refusal(args, exc)) from None
        opened.append(source)
        if args.to is not None:
            if not is_store_url(args.to) or args.to.lower().startswith("memory:"):
                raise UnusableWorkspace(
                    f"--to {public_address(args.to)}: give the store to copy into as a URL"
                    " (sqlite:///PATH or postgresql://USER@HOST/DB; a memory store would keep"
                    " nothing)")
            target, target_name, _ = open_command_store(workspace, args.to, create=True)
            opened.append(target)
        out, err = sys.stdout, sys.stderr
        if args.action == "list":
            return keys_command.list_keys(source, limit=args.limit, as_json=args.json, out=out)
        if args.action == "show":
            return keys_command.show_key(source, args.key, as_json=args.json, out=out, err=err)
        if args.action == "purge":
            return keys_command.purge_keys(source, as_json=args.json, out=out)
        return keys_command.copy_keys(source, target, source_name=name, target_name=target_name,
                                      as_json=args.json, out=out)
    except (UnusableWorkspace, StoreError) as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `keys list | head`: the reader has seen enough
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    finally:
        for store in opened:
            store.close()


def _demo(args: argparse.Namespace) -> int:
    from agentkit.demo.agent import run_agent
    from agentkit.demo.fake_model import FakeModel
    from agentkit.demo.tools import make_demo_registry
    from agentkit.policy.runner import ToolRunner

    with tempfile.TemporaryDirectory(prefix="agentkit-demo-") as scratch:
        workspace = args.workspace or scratch
        runner = ToolRunner(make_demo_registry(workspace))
        transcript = run_agent(FakeModel(), runner, args.question)
        print(transcript.to_text())
    return 0
