"""The command line: ``python -m agentkit matrix`` and ``python -m agentkit demo``.

    python -m agentkit matrix            play every cell of the failure matrix; exit 1 on a mismatch
    python -m agentkit matrix --csv F    the same, with the expectations of another CSV file
    python -m agentkit demo              the baseline transcript: the fake model's happy path
    python -m agentkit serve-mcp         serve the demo tools (or --registry yours) over MCP stdio
    python -m agentkit approvals list    the approvals waiting in a workspace (approve ID, deny ID)
    python -m agentkit approvals approve ID --dbos-system-database URL
                                         send the decision to the DBOS workflow that owns it
    python -m agentkit keys list         the keys in a store (show KEY, release KEY, purge,
                                         copy --to URL)
    python -m agentkit desk              the approvals desk: a web page where a person decides
    python -m agentkit audit export      the store's audit log as JSON lines (verify FILE,
                                         keygen FILE)

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
from typing import TYPE_CHECKING, Any, Literal

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
        help="serve the demo tools over MCP (stdio, or streamable HTTP), with the whole policy",
        description=(
            "Serve the demo registry to an MCP host over stdin/stdout, every call through a "
            "ToolRunner with a durable store (the workspace's SQLite file, or --store / "
            f"${STORE_ENV}). Only protocol messages go to stdout; logs go to stderr. "
            "With --transport streamable-http: over HTTP at http://HOST:PORT/mcp instead "
            "(the loopback unless --host says otherwise), every request carrying the token "
            "(Authorization: Bearer TOKEN, or ?token=TOKEN): --token, else "
            "$AGENTKIT_MCP_TOKEN, else one made now and printed with the address as one URL "
            "on stdout, for a host to connect to (an MCP Inspector: transport 'Streamable "
            "HTTP' and that URL). Needs the 'mcp' extra."
        ),
    )
    serve.add_argument("--workspace", metavar="DIR", default=None, help=workspace_help)
    serve.add_argument("--store", metavar="URL", default=None, help=STORE_HELP)
    serve.add_argument("--registry", metavar="MODULE:ATTRIBUTE", default=None, help=REGISTRY_HELP)
    serve.add_argument(
        "--approvals", choices=["cli", "elicit", "auto"], default="cli",
        help=("who settles an irreversible call: 'cli' (the default) only a person running "
              "'agentkit approvals' on this store (or a panel, the desk); 'elicit' also the "
              "client's user, through an MCP elicitation when the client declares it: that "
              "trusts the host to show it to a person (an agent client may answer by itself). "
              "'auto' is the old name of 'elicit' (deprecated)"),
    )
    serve.add_argument(
        "--task-id", metavar="ID", default="mcp",
        help=("the task of a call whose _meta names none (\"agentkit/task_id\" names a "
              "conversation's own): default 'mcp', one task for every conversation of the "
              "host, so the same write asked in two conversations runs once"),
    )
    serve.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                       help=("the stderr log level (default: INFO); a client sets its own "
                             "with logging/setLevel"))
    serve.add_argument(
        "--transport", choices=["stdio", "streamable-http"], default="stdio",
        help="stdio (the default: the host starts this command) or streamable-http (a server "
             "hosts connect to by URL)")
    serve.add_argument("--host", metavar="ADDRESS", default=None,
                       help="streamable-http: the address to bind (default: 127.0.0.1, the "
                            "loopback); any other needs an explicit token")
    serve.add_argument("--port", metavar="N", type=int, default=None,
                       help="streamable-http: the port (default: 8765; 0: any free one)")
    serve.add_argument("--token", metavar="TOKEN", default=None,
                       help="streamable-http: the token every request must carry (default: "
                            "$AGENTKIT_MCP_TOKEN, else a new one, printed in the URL)")
    serve.set_defaults(run=_serve_mcp)

    approvals = commands.add_parser(
        "approvals",
        help="list, approve or deny the irreversible calls waiting in a workspace",
        description=(
            "Settle, as a person, the approvals an MCP client asked for "
            "(docs/design.md#approvals: the model never approves itself). 'list' shows each "
            "waiting call with its owner (task, workflow). 'approve' runs the call once, here, "
            "and keeps its result in the store: the client asking again gets it with "
            "replayed: true. Exit status 0 decided (or the same decision again), 1 refused "
            "(an unknown, expired or already contradicted id: the line says which) or the "
            "approved run failed, 2 the store or the registry cannot be used (a registry "
            "without the approval's tool leaves it pending)."
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
        help=("the DBOS workflow the decision goes to (agentkit.faces.dbos: "
              "tools.wait_for_decision); optional: the approval's record names the workflow "
              "that owns it, and this must be it. The workflow's own step then runs the call, "
              "or denies it; nothing is settled here. Needs the 'dbos' extra"))
    approvals.add_argument(
        "--dbos-system-database", metavar="URL", default=None,
        help=("DBOS's system database, as in the application's config (sqlite:///path or "
              "postgresql://...; default: $DBOS_SYSTEM_DATABASE_URL): a decision on an "
              "approval a DBOS workflow owns is sent there (without it, refused: exit 2)"))
    approvals.add_argument("--dbos-schema", metavar="NAME", default="dbos",
                           help="with --dbos-system-database: DBOS's system schema (default: dbos)")
    approvals.add_argument("--json", action="store_true",
                           help="one JSON document (each approval's status, owner and "
                                "decision; for approve and deny, the result too), for scripts")
    approvals.add_argument(
        "--approver", metavar="NAME", default=None,
        help=("who decides, kept with the decision and in the store's audit log (default: "
              "your login name)"))
    approvals.set_defaults(run=_approvals)

    desk = commands.add_parser(
        "desk",
        help="serve the approvals desk: a web page where a person approves or denies",
        description=(
            "Serve a page (docs/design.md#approvals-desk) listing every approval waiting in "
            "the store, with the evidence to decide it, and the calls in doubt. It listens on "
            "the loopback unless --host says otherwise and prints one URL with a login token: "
            "without it nothing is shown or decided. Approve and Deny are exactly the "
            "decisions of 'agentkit approvals', and each is appended to the store's audit log "
            "with the person's name. Needs the 'desk' extra."
        ),
    )
    desk.add_argument("--workspace", metavar="DIR", default=None,
                      help=f"{workspace_help}; it must exist: nothing is created")
    desk.add_argument("--store", metavar="URL", default=None,
                      help=STORE_HELP.replace("the store:", "an existing store:"))
    desk.add_argument("--registry", metavar="MODULE:ATTRIBUTE", default=None,
                      help=REGISTRY_HELP + " (the tools the approvals run)")
    desk.add_argument("--host", default="127.0.0.1",
                      help="the address to listen on (default: 127.0.0.1, this machine only)")
    desk.add_argument("--port", type=_port, default=8765,
                      help="the port (default: 8765; 0: any free port)")
    desk.add_argument("--approver", metavar="NAME", default=None,
                      help=("the one person who decides on this desk (default: each person "
                            "gives a name when logging in)"))
    desk.add_argument("--four-eyes", metavar="TOOL", nargs="+", default=[],
                      help="tools whose approvals need two different people")
    desk.add_argument(
        "--dbos-system-database", metavar="URL", default=None,
        help=("DBOS's system database (default: $DBOS_SYSTEM_DATABASE_URL): a decision on an "
              "approval a DBOS workflow owns is sent there (without it, refused)"))
    desk.add_argument("--token", metavar="TOKEN", default=None,
                      help="the login token (default: a new random one; or $AGENTKIT_DESK_TOKEN)")
    desk.set_defaults(run=_desk)

    audit = commands.add_parser(
        "audit",
        help="export the store's audit log, verify an export, or make a signing key",
        description=(
            "The evidence of every decision, release and purge "
            "(docs/design.md#approvals-desk). 'export' writes the store's audit log as JSON "
            "lines (to --out FILE, or standard output); 'verify FILE' checks an export "
            "offline: the hash chain, and with --public-key PEM every Ed25519 signature. A "
            "changed, removed, added or moved entry fails with its number. 'keygen FILE' "
            "writes a new signing key (for $AGENTKIT_AUDIT_SIGNING_KEY) and FILE.pub. Exit "
            "status 0 done (verify: unbroken), 1 verify found a break, 2 an unusable file, "
            "key or store."
        ),
    )
    audit.add_argument("action", choices=["export", "verify", "keygen"])
    audit.add_argument("file", nargs="?", metavar="FILE", help="for verify and keygen")
    audit.add_argument("--out", metavar="FILE", default=None,
                       help="for export: the file to write (default: standard output)")
    audit.add_argument("--public-key", metavar="PEM", default=None,
                       help="for verify: check every entry's signature with this public key")
    audit.add_argument("--store", metavar="URL", default=None,
                       help=STORE_HELP.replace("the store:", "an existing store:"))
    audit.add_argument("--workspace", metavar="DIR", default=None,
                       help=f"a workspace whose store to use (default: {DEFAULT_WORKSPACE})")
    audit.set_defaults(run=_audit)

    keys = commands.add_parser(
        "keys",
        help="list, show, release, purge or copy the idempotency keys of a store",
        description=(
            "Look into an existing agentkit store (docs/design.md#operating-the-stores; a "
            "file or database without agentkit's tables is refused, and nothing is created "
            "in it): 'list' its keys, 'show' one, 'release' one stuck claim (only a stale "
            "one: its lease passed, its owner gone, or its outcome unknown; a live claim, a "
            "completed or an unknown key is refused), 'purge' the completed keys and settled "
            "approvals past retention (never a claim, never a pending approval), 'copy' its "
            "keys, approvals and audit log into another store (--to URL) so that a write "
            "asked again there replays instead of running again (refused while a claim is "
            "open, if the store changes during the copy: stop the workers first, or if the "
            "target's audit log is one of its own). Plain text, or one JSON "
            "document with --json. Exit status 0 done, 1 no such key (show), 2 refused or an "
            "unusable path, URL or store (one line on stderr)."
        ),
    )
    keys.add_argument("action", choices=["list", "show", "release", "purge", "copy"])
    keys.add_argument("key", nargs="?", metavar="KEY", help="for show and release")
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
    keys.add_argument("--note", metavar="TEXT", default=None,
                      help="for release: what you checked (kept in the store's audit log)")
    keys.add_argument("--approver", metavar="NAME", default=None,
                      help=("for release and purge: who does it, in the store's audit log "
                            "(default: your login name)"))
    keys.set_defaults(run=_keys)
    return parser


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535: {text!r}")
    return value


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
    task_id: str = "mcp",
) -> ToolRunner:
    """The runner ``serve-mcp`` and ``approvals`` share: ``registry`` (default: the demo tools
    writing into ``WORKSPACE/files``, where the model cannot reach the store or the secret
    beside it), a durable store (default ``WORKSPACE/agentkit.sqlite3``; ``store`` is a URL
    or an SQLite file's path, see :func:`open_command_store`), and one fixed caller context
    (task ``task_id``, ``serve-mcp --task-id``), so that both commands compute the same keys
    and approval ids for the same intent.

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
    context = CallContext(task_id=task_id, principal="mcp-host")
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
    workspace's ``agentkit.sqlite3``. ``create=False`` opens only an existing agentkit store
    (an SQLite file or a PostgreSQL database without agentkit's tables is refused, and
    nothing is created in it: :func:`~agentkit.policy.stores.address.open_existing_store`)
    and refuses ``memory:`` (an empty store of this process). A PostgreSQL store connects on
    its first call. Raises :class:`UnusableWorkspace` (one line, no password)."""
    from agentkit.policy.stores import (
        SQLiteIdempotencyStore,
        StoreError,
        open_store,
        public_address,
    )
    from agentkit.policy.stores.address import (
        existing_sqlite_store,
        open_existing_store,
        sqlite_path,
    )

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
                f"{public_address(url)}: a memory store lives in one process, so this command"
                " would see an"
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
        if create:  # a runner's store may be new: its tables are made
            opened = (SQLiteIdempotencyStore(path, **options) if url is None
                      else open_store(url, **options))
        else:  # an operator's command: only an agentkit store, and nothing is created
            opened = (existing_sqlite_store(path, **options) if url is None
                      else open_existing_store(url, **options))
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
        from agentkit.faces.mcp import load_secret, serve_stdio, task_id_problem
    except ImportError as exc:
        print(f"agentkit serve-mcp: needs the 'mcp' extra (pip install 'agentkit[mcp]'): {exc}",
              file=sys.stderr)
        return 2
    problem = task_id_problem(args.task_id)
    if problem is not None:
        print(f"agentkit serve-mcp: --task-id: {problem}", file=sys.stderr)
        return 2
    http = _http_settings(args)
    if isinstance(http, str):
        print(f"agentkit serve-mcp: {http}", file=sys.stderr)
        return 2
    approvals: Literal["cli", "elicit"] = "cli" if args.approvals == "cli" else "elicit"
    if args.approvals == "auto":
        print("agentkit serve-mcp: --approvals auto is the old name of --approvals elicit "
              "(deprecated); approvals are elicited", file=sys.stderr)
    _log_to_stderr(args.log_level)
    root = Path(args.workspace or DEFAULT_WORKSPACE).expanduser()
    try:
        registry = load_registry(args.registry) if args.registry else None
        runner = workspace_runner(root, registry=registry, store=chosen_store(args),
                                  task_id=args.task_id)
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
        "serving %s over %s; workspace %s; store %s; approvals: %s; task id %r (a call's "
        "_meta \"agentkit/task_id\" names its own)", tools, args.transport, root,
        getattr(runner.store, "address", None) or getattr(runner.store, "path", "in memory"),
        approvals, args.task_id)
    if http is not None:
        return _serve_mcp_http(args, http, runner, secret, approvals)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C in a terminal: a quiet exit
        asyncio.run(serve_stdio(runner, secret=secret, approvals=approvals))
    return 0


def _log_to_stderr(level: str) -> None:
    """``logging.basicConfig`` for ``serve-mcp``: stderr at ``level``, while every record
    still reaches the root logger's handlers (a client may ask for its calls' debug lines:
    ``logging/setLevel``). Nothing changes where logging is configured already."""
    import logging

    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(level)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)


def _http_settings(args: argparse.Namespace) -> tuple[str, int, str, bool] | str | None:
    """``serve-mcp``'s HTTP flags as (host, port, token, made), None for stdio, or why they
    cannot be used (one line, never the token)."""
    from agentkit.faces import mcp_http

    if args.transport == "stdio":
        extra = [flag for flag, value in (("--host", args.host), ("--port", args.port),
                                          ("--token", args.token)) if value is not None]
        return f"{', '.join(extra)}: only with --transport streamable-http" if extra else None
    host = args.host if args.host is not None else mcp_http.DEFAULT_HOST
    port = args.port if args.port is not None else mcp_http.DEFAULT_PORT
    if not host or not host.isprintable() or any(char.isspace() for char in host):
        return "--host: give an address (127.0.0.1, ::1, a name of this machine, 0.0.0.0)"
    if not 0 <= port <= 65535:
        return f"--port: {port} is not a port (0 to 65535; 0: any free one)"
    token, source = mcp_http.token_from(args.token)
    if token is not None:
        problem = mcp_http.token_problem(token)
        if problem is not None:
            return f"{source}: {problem}"
        return host, port, token, False
    if not mcp_http.is_loopback(host):
        return (f"--host {host} is not the loopback: anyone who reaches it could call the "
                f"tools, so give the token explicitly (--token, or ${mcp_http.TOKEN_ENV})")
    return host, port, mcp_http.make_token(), True


def _serve_mcp_http(args: argparse.Namespace, http: tuple[str, int, str, bool],
                    runner: ToolRunner, secret: bytes, approvals: Literal["cli", "elicit"]) -> int:
    import asyncio
    import contextlib
    import logging

    from agentkit.faces import mcp_http
    from agentkit.faces.mcp import make_server

    host, port, token, made = http
    try:
        sock = mcp_http.bind(host, port)
    except OSError as exc:
        runner.store.close()
        print(f"agentkit serve-mcp: cannot listen on {host} port {port}: {_reason(exc)}",
              file=sys.stderr)
        return 2
    server = make_server(runner, secret=secret, approvals=approvals)

    def ready(bound: int) -> None:
        # stdout: one line, the URL a host connects to (with the token when made here)
        print(mcp_http.server_url(host, bound, token if made else None), flush=True)
        logging.getLogger("agentkit").info(
            "listening on %s (token: %s)", mcp_http.server_url(host, bound),
            "in the URL printed on stdout" if made else "as given")

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(mcp_http.serve_http(server, sock, token=token, host=host, ready=ready))
    return 0


def _approvals(args: argparse.Namespace) -> int:
    from agentkit.faces import approvals_command
    from agentkit.policy.stores import StoreError

    command = f"agentkit approvals {args.action}"
    if args.action != "list" and not args.approval_id:
        print(f"{command}: give the approval ID", file=sys.stderr)
        return 2
    if args.dbos_workflow is not None or args.dbos_system_database is not None:
        return _to_dbos(args, command)
    if args.dbos_schema != "dbos":
        print(f"{command}: --dbos-schema goes with --dbos-system-database", file=sys.stderr)
        return 2
    routed = _owned_by_a_workflow(args, command)
    if routed is not None:  # a workflow's approval: its decision goes to the workflow
        return routed
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
            return approvals_command.list_approvals(runner, as_json=args.json, out=sys.stdout)
        return approvals_command.decide(runner, args.approval_id, args.action, as_json=args.json,
                                        out=sys.stdout, err=sys.stderr, command=command,
                                        approver=_approver(args, command))
    except StoreError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 2
    finally:
        runner.store.close()


def _owned_by_a_workflow(args: argparse.Namespace, command: str) -> int | None:
    """``approve|deny ID`` without ``--dbos-...``: None when no engine workflow owns the
    approval (or it is decided already: the store path tells), else its exit status. A
    workflow's approval is decided by the workflow (docs/design.md#approvals): a DBOS one is routed there
    when ``$DBOS_SYSTEM_DATABASE_URL`` names DBOS's database, else refused (exit 2) with a
    line that says how to route it; a Temporal one is refused (exit 2): send it a Signal."""
    from agentkit.boundary.canonical import escape_invisible
    from agentkit.policy.approvals import PENDING, RUNNING
    from agentkit.policy.stores import StoreError

    if args.action == "list":
        return None
    try:
        runner = workspace_runner(args.workspace or DEFAULT_WORKSPACE, store=chosen_store(args),
                                  create=False)
    except UnusableWorkspace:
        return None  # the store path says why, in its one line
    try:
        record = runner.approvals.get(args.approval_id)
    except StoreError:
        return None
    finally:
        runner.store.close()
    owner = record.get("workflow") if record is not None else None
    if not isinstance(owner, dict) or record is None or record["state"] not in (PENDING, RUNNING):
        return None
    shown, wf = escape_invisible(args.approval_id), escape_invisible(str(owner.get("id")))
    if owner.get("engine") == "dbos":
        if os.environ.get("DBOS_SYSTEM_DATABASE_URL"):
            return _to_dbos(args, command)
        print(f"{command}: approval {shown} belongs to DBOS workflow {wf}: its decision goes to "
              "that workflow; give --dbos-system-database URL (or set DBOS_SYSTEM_DATABASE_URL) "
              "to send it there. Nothing was decided", file=sys.stderr)
        return 2
    print(f"{command}: approval {shown} belongs to {escape_invisible(str(owner.get('engine')))}"
          f" workflow {wf}: its decision goes to that workflow (send it the workflow's decision "
          "Signal); this command cannot reach it. Nothing was decided", file=sys.stderr)
    return 2


def _to_dbos(args: argparse.Namespace, command: str) -> int:
    """``approve|deny ID`` of an approval a DBOS workflow owns (``--dbos-system-database``;
    ``--dbos-workflow``, when given, must be its owner): check it in the store, keep the
    first decision there, and send it to the workflow through DBOS (the call runs, or is
    denied, as the workflow's own step; nothing runs here). A second decision that
    contradicts the first: exit 1; the same one again: sent again, exit 0; a workflow that
    ended: the approval is settled forbidden, exit 1; one that cannot be reached now (a
    cancelled workflow, a bad URL): exit 2, nothing changed (:func:`agentkit.faces.dbos.route_decision`)."""
    import logging

    from agentkit.policy.stores import StoreError

    if args.action == "list":
        print(f"{command}: --dbos-workflow and --dbos-system-database go with approve or deny",
              file=sys.stderr)
        return 2
    url = args.dbos_system_database or os.environ.get("DBOS_SYSTEM_DATABASE_URL", "")
    if not url:
        print(f"{command}: with --dbos-workflow, give --dbos-system-database URL (or set "
              "DBOS_SYSTEM_DATABASE_URL)", file=sys.stderr)
        return 2
    try:
        from agentkit.faces.dbos import DecisionNotSent, route_decision
    except ImportError as exc:
        print(f"{command}: a DBOS workflow's decision needs the 'dbos' extra (pip install "
              f"'agentkit[dbos]'): {exc}", file=sys.stderr)
        return 2
    try:
        runner = workspace_runner(args.workspace or DEFAULT_WORKSPACE, store=chosen_store(args),
                                  create=False)
    except UnusableWorkspace as exc:
        print(f"{command}: {refusal(args, exc)}", file=sys.stderr)
        return 2
    dbos_log = logging.getLogger("dbos")
    was_disabled, dbos_log.disabled = dbos_log.disabled, True  # its errors: our one line
    try:
        status, line = route_decision(
            runner.approvals, args.approval_id, args.action == "approve",
            system_database_url=url, workflow_id=args.dbos_workflow,
            dbos_system_schema=args.dbos_schema, approver=_approver(args, command))
    except (DecisionNotSent, StoreError) as exc:
        status, line = 2, " ".join(str(exc).split())
    finally:
        dbos_log.disabled = was_disabled
        runner.store.close()
    if status == 0:
        print(line)
    else:
        from agentkit.boundary.canonical import escape_invisible

        print(f"{command}: {escape_invisible(line)}", file=sys.stderr)
    return status


def _keys(args: argparse.Namespace) -> int:
    from agentkit.faces import keys_command
    from agentkit.policy.stores import DEFAULT_RETENTION_SECONDS, StoreError, public_address

    command = f"agentkit keys {args.action}"
    misuse = None
    if args.action in ("show", "release") and not args.key:
        misuse = f"give the KEY to {args.action}"
    elif args.action not in ("show", "release") and args.key:
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
            source.key_page(None, 1)  # a source that is refused leaves no new target behind
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
        if args.action == "release":
            return keys_command.release_key(source, args.key, as_json=args.json, out=out,
                                            err=err, who=_approver(args, command),
                                            note=args.note)
        if args.action == "purge":
            return keys_command.purge_keys(source, as_json=args.json, out=out,
                                           who=_approver(args, command))
        return keys_command.copy_keys(source, target, source_name=name, target_name=target_name,
                                      as_json=args.json, out=out, err=err)
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


def _approver(args: argparse.Namespace, command: str = "") -> str | None:
    """The person deciding: ``--approver``, else the login name (None when there is none)."""
    import getpass

    if args.approver is not None:
        return str(args.approver)
    try:
        return getpass.getuser() or None
    except (OSError, KeyError, ImportError):
        return None


def _desk(args: argparse.Namespace) -> int:
    command = "agentkit desk"
    try:
        import starlette  # noqa: F401 - checked here for a clear message
        import uvicorn  # noqa: F401

        from agentkit.faces.desk.command import desk_problem, run_desk
    except ImportError as exc:
        print(f"{command}: needs the 'desk' extra (pip install 'agentkit-boundary[desk]'):"
              f" {exc}", file=sys.stderr)
        return 2
    problem = desk_problem(args)
    if problem is not None:
        print(f"{command}: {problem}", file=sys.stderr)
        return 2
    try:
        registry = load_registry(args.registry) if args.registry else None
        runner = workspace_runner(args.workspace or DEFAULT_WORKSPACE, registry=registry,
                                  store=chosen_store(args), create=False, task_id="desk")
    except UnusableWorkspace as exc:
        print(f"{command}: {refusal(args, exc)}", file=sys.stderr)
        return 2
    return run_desk(args, runner)


def _audit(args: argparse.Namespace) -> int:
    from agentkit.faces import audit_command
    from agentkit.policy.stores import StoreError

    command = f"agentkit audit {args.action}"
    misuse = None
    if args.action in ("verify", "keygen") and not args.file:
        misuse = "give the FILE to " + args.action
    elif args.action == "export" and args.file:
        misuse = "export takes no FILE (write it with --out FILE)"
    elif args.out is not None and args.action != "export":
        misuse = "--out is for export"
    elif args.public_key is not None and args.action != "verify":
        misuse = "--public-key is for verify"
    elif args.action != "export" and (args.store or args.workspace):
        misuse = f"{args.action} uses no store (verify reads only the file)"
    if misuse:
        print(f"{command}: {misuse}", file=sys.stderr)
        return 2
    if args.action == "verify":
        return audit_command.verify_audit(args.file, args.public_key, sys.stdout, sys.stderr,
                                          command=command)
    if args.action == "keygen":
        return audit_command.keygen(args.file, sys.stdout, sys.stderr, command=command)
    workspace = Path(args.workspace or DEFAULT_WORKSPACE).expanduser()
    try:
        store, _, _ = open_command_store(workspace, chosen_store(args), create=False)
    except UnusableWorkspace as exc:
        print(f"{command}: {refusal(args, exc)}", file=sys.stderr)
        return 2
    try:
        if args.out is None:
            return audit_command.export_audit(store, sys.stdout, sys.stderr, command=command)
        try:
            with open(args.out, "w", encoding="utf-8", newline="\n") as out:
                return audit_command.export_audit(store, out, sys.stderr, command=command)
        except OSError as exc:
            print(f"{command}: {args.out}: cannot write it ({_reason(exc)})", file=sys.stderr)
            return 2
    except StoreError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 2
    finally:
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
