"""Re-execute notebooks top to bottom and store their outputs (``make notebooks``).

Each notebook runs in a fresh kernel of the current environment with its own folder as the
working directory, exactly as nbval will re-run it, so what is stored is what is checked.
Cells tagged ``raises-exception`` may fail; any other error stops the run with the cell shown.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

TIMEOUT_PER_CELL = 120
#: A widget's view output names its model by a random id; nbval never compares it, and with no
#: widget state stored it could not be drawn anyway. Dropping it keeps every run's file
#: byte-identical; the widget's short text repr stays and is what a reader sees until it runs.
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def run(path: Path) -> float:
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=TIMEOUT_PER_CELL,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        record_timing=False,
        allow_errors=False,
        # Widget model ids are random: storing their state would change the file on every
        # run (see WIDGET_VIEW). Unrun, a stored widget shows its short text repr.
        store_widget_state=False,
    )
    started = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - started
    notebook.metadata.pop("widgets", None)
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            output.get("data", {}).pop(WIDGET_VIEW, None)
    nbformat.write(notebook, path)
    return elapsed


def main(argv: list[str]) -> int:
    targets = [Path(a) for a in argv] or [Path("notebooks")]
    paths: list[Path] = []
    for target in targets:
        # "02b_mcp" sorts after "02_tool_registry" and before "03_…", as the lessons run.
        paths += sorted(target.glob("[0-9][0-9]*_*.ipynb")) if target.is_dir() else [target]
    os.environ.setdefault("PYTHONHASHSEED", "0")
    total = 0.0
    for path in paths:
        try:
            elapsed = run(path)
        except CellExecutionError as exc:
            print(f"FAILED {path}\n{exc}", file=sys.stderr)
            return 1
        total += elapsed
        print(f"{path}: {elapsed:.1f}s")
    print(f"{len(paths)} notebook(s) in {total:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
