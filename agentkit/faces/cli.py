"""The command line: ``python -m agentkit matrix`` and ``python -m agentkit demo``.

    python -m agentkit matrix            play every cell of the failure matrix; exit 1 on a mismatch
    python -m agentkit matrix --csv F    the same, with the expectations of another CSV file
    python -m agentkit demo              the baseline transcript: the fake model's happy path
    python -m agentkit serve-mcp         serve the demo tools to an MCP host over stdio
    python -m agentkit approvals list    the approvals waiting in a workspace (approve ID, deny ID)

Imports are made inside each command, so ``--help`` answers at once; no command loads pandas,
so both work on a plain ``pip install`` without the notebook extras.
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
    from agentkit.policy.runner import ToolRunner

DEFAULT_QUESTION = "idempotency key retry"

#: Where ``serve-mcp`` and ``approvals`` keep their state unless ``--workspace`` says otherwise:
#: ``files/`` (what the demo tools write), ``agentkit.sqlite3`` (idempotency keys, approvals)
#: and ``mcp-secret`` (the key that seals elicitation state).
DEFAULT_WORKSPACE = "~/.agentkit"


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

    workspace_help = f"the server's workspace (default: {DEFAULT_WORKSPACE})"
    serve = commands.add_parser(
        "serve-mcp",
        help="serve the demo tools over MCP (stdio), with the whole policy applied",
        description=(
            "Serve the demo registry to an MCP host over stdin/stdout, every call through a "
            "ToolRunner with a durable SQLite store in the workspace. Only protocol messages "
            "go to stdout; logs go to stderr. Needs the 'mcp' extra."
        ),
    )
    serve.add_argument("--workspace", metavar="DIR", default=DEFAULT_WORKSPACE, help=workspace_help)
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
    approvals.add_argument("--workspace", metavar="DIR", default=DEFAULT_WORKSPACE, help=workspace_help)
    approvals.set_defaults(run=_approvals)
    return parser


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


def workspace_runner(workspace: str | os.PathLike[str]) -> ToolRunner:
    """The runner ``serve-mcp`` and ``approvals`` share: the demo tools writing into
    ``WORKSPACE/files`` (the model cannot reach the store or the secret beside it), a durable
    SQLite store ``WORKSPACE/agentkit.sqlite3``, and one fixed caller context, so that both
    commands compute the same keys and approval ids for the same intent."""
    from agentkit.boundary.context import CallContext
    from agentkit.demo.tools import make_demo_registry
    from agentkit.policy.runner import ToolRunner
    from agentkit.policy.stores import SQLiteIdempotencyStore

    root = Path(workspace).expanduser()
    root.mkdir(parents=True, exist_ok=True)
    store = SQLiteIdempotencyStore(root / "agentkit.sqlite3")
    context = CallContext(task_id="mcp", principal="mcp-host")
    return ToolRunner(make_demo_registry(root / "files"), store=store, context=context)


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
    root = Path(args.workspace).expanduser()
    runner = workspace_runner(root)
    logging.getLogger("agentkit").info("serving the demo tools over stdio; workspace %s", root)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C in a terminal: a quiet exit
        asyncio.run(serve_stdio(runner, secret=load_secret(root / "mcp-secret")))
    return 0


def _approvals(args: argparse.Namespace) -> int:
    import json

    if args.action != "list" and not args.approval_id:
        print(f"agentkit approvals {args.action}: give the approval ID", file=sys.stderr)
        return 2
    runner = workspace_runner(args.workspace)
    if args.action == "list":
        pending = runner.pending_approvals()
        if not pending:
            print("no pending approvals")
        for record in pending:
            shown = json.dumps(record["arguments"], ensure_ascii=False, sort_keys=True)
            print(f"{record['approval_id']}  {record['tool']}  {shown}")
        return 0
    settle = runner.approve if args.action == "approve" else runner.deny
    result = settle(args.approval_id)
    print(json.dumps(result, ensure_ascii=False))
    return 0 if result.get("ok") or args.action == "deny" and result.get("error") == "forbidden" else 1


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
