"""A user's code type-checks against the installed kit, outside this repository (issue 30).

``mypy --strict`` (this venv's) runs in a temporary folder on the docs' own ``my_server.py``
(docs/hosts/mcp.md) and on a file of mistakes: the first passes, each mistake is an error at
its line; and on every ``python`` block of the README and of the documentation pages (the
blocks tests/test_readme.py runs, and those marked not run offline), as written (issue 42). Outside the
tree mypy finds ``agentkit`` only through the install: pip's editable install is an import hook
that type checkers cannot run, so ``make install`` adds a static path entry for them (see the
Makefile); a wheel install carries ``py.typed`` itself (tests/test_wheel.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy")

ROOT = Path(__file__).resolve().parents[1]
#: mypy's cache for these runs, kept between test runs (a cold run analyses the kit and the MCP
#: SDK: ~15 s of CPU; a warm one ~1 s). Where the cache lives does not change what mypy finds.
CACHE = ROOT / ".mypy_cache" / "outside-the-tree"

RIGHT = '''\
"""What a user writes: effect names as strings, scopes as sets, read back precisely."""
from typing_extensions import assert_type

from agentkit import CallContext, Effect, ToolRegistry, ToolSpec


def save_note(text: str) -> str:
    return text


spec = ToolSpec("save_note", "Save a note.", "reversible_write", 2.0, 3, 200, save_note,
                required_scopes={"notes:write"}, status_lookup=lambda text: None)
assert_type(spec.effect, Effect)
assert_type(spec.required_scopes, frozenset[str])
assert_type(spec.effect.is_write, bool)
context = CallContext(task_id="t", principal="me", scopes={"notes:write"})
assert_type(context.scopes, frozenset[str])
ToolSpec("read_note", "Read a note.", Effect.READ, 2.0, 3, 200, save_note,
         required_scopes=["notes:read"])
ToolRegistry([spec])
'''

WRONG = '''\
from agentkit import CallContext, ToolSpec


def save_note(text: str) -> str:
    return text


ToolSpec("save_note", "Save a note.", "write", 2.0, 3, 200, save_note)
ToolSpec("save_note", "Save a note.", "read", 2.0, 3, 200, save_note, required_scopes=3)
CallContext(scopes=7)
ToolSpec("save_note", "Save a note.", "read", "2", 3, 200, save_note)
'''


def mypy_strict(folder: Path, *files: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key not in ("MYPYPATH", "PYTHONPATH")}
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--hide-error-context",
         "--cache-dir", str(CACHE), *files],
        cwd=folder, env=env, capture_output=True, text=True, timeout=600, check=False,
    )


def readme_server() -> str:
    text = (ROOT / "docs" / "hosts" / "mcp.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- serve-your-own:start -->\s*```python\n(.*?)```", text, re.DOTALL)
    assert found, "docs/hosts/mcp.md lost its serve-your-own script"
    return found.group(1)


def test_mypy_strict_passes_on_the_readmes_server_and_flags_each_mistake(tmp_path: Path) -> None:
    folder = tmp_path / "elsewhere"  # not this repository: only the install is on the path
    folder.mkdir()
    (folder / "my_server.py").write_text(readme_server(), encoding="utf-8")
    (folder / "right.py").write_text(RIGHT, encoding="utf-8")
    (folder / "wrong.py").write_text(WRONG, encoding="utf-8")
    checked = mypy_strict(folder, "my_server.py", "right.py", "wrong.py")
    assert "Cannot find implementation or library stub" not in checked.stdout, checked.stdout
    errors = [line for line in checked.stdout.splitlines() if ": error: " in line]
    assert [line.split(":")[0] for line in errors] == ["wrong.py"] * 4, checked.stdout
    by_line = {int(line.split(":")[1]): line for line in errors}
    assert sorted(by_line) == [8, 9, 10, 11], checked.stdout
    assert '"Effect | Literal[\'read\', \'reversible_write\', \'irreversible_write\']"' in by_line[8]
    assert "[arg-type]" in by_line[8]
    assert '"Iterable[str]"' in by_line[9] and '"Iterable[str]"' in by_line[10]
    assert '"float"' in by_line[11]
    assert checked.returncode == 1


def test_every_python_block_of_the_readme_and_the_docs_passes_mypy_strict(tmp_path: Path) -> None:
    """Each block as a user's file outside the tree (those that run and those marked not run
    offline alike): a named block under its name, so that the blocks that import it find it,
    the others under their page and line. One mypy run over all of them."""
    from test_readme import PYTHON

    folder = tmp_path / "elsewhere"
    folder.mkdir()
    files: dict[str, str] = {}
    for block in PYTHON:
        name = block.name or "block_" + re.sub(r"\W", "_", block.where.removesuffix(".md")) + ".py"
        name = name.replace(".md", "")
        assert name not in files, f"two blocks would be saved as {name}"
        files[name] = block.where
        (folder / name).write_text(block.text, encoding="utf-8")
    assert len(files) >= 10 and any(where.startswith("README.md") for where in files.values())
    checked = mypy_strict(folder, *sorted(files))
    assert "Cannot find implementation or library stub" not in checked.stdout, checked.stdout
    errors = [line for line in checked.stdout.splitlines() if ": error: " in line]
    shown = [f"{files[line.split(':')[0]]} (+{line.split(':')[1]}): {line}" for line in errors]
    assert not errors, "\n".join(shown)
    assert checked.returncode == 0, checked.stdout + checked.stderr
