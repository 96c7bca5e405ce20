"""Speed of the boundary (``make bench``): numbers to watch, never asserted in unit tests.

Each line is the median of several rounds, in microseconds per call unless marked.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import agentkit
from agentkit import IdempotencyStore, SQLiteIdempotencyStore, ToolRegistry, ToolRunner, ToolSpec, invoke_tool
from agentkit.boundary.redaction import Redactor, shape_output


def search(query: str, limit: int = 3) -> list[str]:
    return [query] * limit


def save(name: str, text: str) -> dict:
    return {"saved": name}


def per_call(fn: Callable[[int], object], n: int, rounds: int = 5) -> float:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for i in range(n):
            fn(i)
        samples.append((time.perf_counter() - start) / n * 1e6)
    return statistics.median(samples)


def main() -> int:
    agentkit.set_testing(True)
    registry = ToolRegistry([
        ToolSpec("search", "Search.", "read", 2.0, 3, 2_000, search),
        ToolSpec("save", "Save.", "reversible_write", 2.0, 3, 2_000, save),
    ])
    runner = ToolRunner(registry)
    lines = [
        ("invoke_tool, ok", per_call(lambda i: invoke_tool(registry, "search", {"query": "q"}), 2_000)),
        ("invoke_tool, invalid_arguments", per_call(lambda i: invoke_tool(registry, "search", {"q": 1}), 2_000)),
        ("invoke_tool, unknown_tool", per_call(lambda i: invoke_tool(registry, "nope", {}), 2_000)),
        ("ToolRunner.call, read ok", per_call(lambda i: runner.call("search", {"query": "q"}), 2_000)),
        ("ToolRunner.call, new write (memory store)",
         per_call(lambda i: runner.call("save", {"name": f"n{i}", "text": "t"}), 1_000, rounds=1)),
        ("ToolRunner.call, replayed write (memory store)",
         per_call(lambda i: runner.call("save", {"name": "n1", "text": "t"}), 2_000)),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        durable = ToolRunner(registry, store=SQLiteIdempotencyStore(Path(tmp) / "s.sqlite"))
        lines.append(("ToolRunner.call, new write (SQLite store)",
                      per_call(lambda i: durable.call("save", {"name": f"n{i}", "text": "t"}), 300, rounds=1)))
        lines.append(("ToolRunner.call, replayed write (SQLite store)",
                      per_call(lambda i: durable.call("save", {"name": "n1", "text": "t"}), 1_000)))
        durable.store.close()
    big = "word " * 2_000_000
    lines.append(("shape 10 MB str to 2,000 chars (redaction on)",
                  per_call(lambda i: shape_output(big, 2_000, Redactor()), 50)))
    store = IdempotencyStore()
    lines.append(("IdempotencyStore.run_once, completed key",
                  per_call(lambda i: store.run_once("k", lambda: {"ok": True, "data": "x"}), 5_000)))
    width = max(len(name) for name, _ in lines)
    print(f"python {sys.version.split()[0]}, median of rounds, microseconds per call")
    for name, micros in lines:
        print(f"{name:<{width}}  {micros:10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
