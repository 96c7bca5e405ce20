"""RSS growth over many ``ToolRunner.call`` reads, in a fresh process (run by benchmarks/run.py).

Prints one JSON object: the resident set size after a warm-up and after ``calls`` more calls
(both after a garbage collection), in bytes, and how long the calls took.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import sys
import time


def rss_bytes() -> int:
    """The resident set size now (Linux /proc), else the peak the kernel reports."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


def search(query: str, limit: int = 3) -> list[str]:
    return [query] * limit


def main(calls: int) -> int:
    from agentkit import ToolRegistry, ToolRunner, ToolSpec

    runner = ToolRunner(ToolRegistry([ToolSpec("search", "Search.", "read", 2.0, 3, 2_000, search)]))
    for _ in range(1_000):
        runner.call("search", {"query": "q"})
    gc.collect()
    before = rss_bytes()
    start = time.perf_counter()
    for _ in range(calls):
        result = runner.call("search", {"query": "q"})
    elapsed = time.perf_counter() - start
    assert result["ok"], result
    gc.collect()
    after = rss_bytes()
    print(json.dumps({"calls": calls, "before": before, "after": after, "seconds": elapsed}))
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000))
