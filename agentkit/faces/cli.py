"""The command line: ``python -m agentkit matrix`` and ``python -m agentkit demo``.

    python -m agentkit matrix            play every cell of the failure matrix; exit 1 on a mismatch
    python -m agentkit matrix --csv F    the same, with the expectations of another CSV file
    python -m agentkit demo              the baseline transcript: the fake model's happy path

Imports are made inside each command, so ``--help`` answers at once; no command loads pandas,
so both work on a plain ``pip install`` without the notebook extras.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

DEFAULT_QUESTION = "idempotency key retry"


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
