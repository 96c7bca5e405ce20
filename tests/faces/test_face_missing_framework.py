"""A face imported without its framework says what to install, in one line, never a traceback.

`make lab` leaves notebook 08's frameworks and notebook 10's engines out (`make frameworks` adds
them); a learner who opens 08 or 10 anyway meets this in its first cell. Each case hides the framework's modules
(``sys.modules[name] = None`` makes ``import name`` fail as if it were not installed).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

#: face module → (extra, the framework's top-level modules, what the face calls it)
FACES = {
    "openai_agents": ("openai-agents", ["agents"], "framework"),
    "pydantic_ai": ("pydantic-ai", ["pydantic_ai"], "framework"),
    "langgraph": ("langgraph", ["langgraph", "langchain_core"], "framework"),
    # notebook 10's durable-execution engines, also left out of `make lab`
    "dbos": ("dbos", ["dbos"], "engine"),
    "temporal": ("temporal", ["temporalio"], "engine"),
}


def hide(modules: list[str]) -> str:
    return "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in modules)


@pytest.mark.parametrize("face", sorted(FACES))
def test_the_error_names_the_missing_module_and_what_to_install(face: str) -> None:
    extra, modules, kind_of = FACES[face]
    code = hide(modules) + f"""
try:
    import agentkit.faces.{face}
except ModuleNotFoundError as exc:
    print(type(exc).__name__, exc.name)
    print(exc)
    print(exc._render_traceback_())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    kind, message, rendered = out.stdout.splitlines()
    name, missing = kind.split()
    assert name == "MissingFramework" and missing.split(".")[0] in modules
    assert f"agentkit.faces.{face} needs the {extra} {kind_of}" in message
    assert "`make frameworks`" in message and f"`pip install 'agentkit[{extra}]'`" in message
    assert "restart the kernel" in message
    assert rendered == repr([f"MissingFramework: {message}"])


def test_a_notebook_cell_shows_one_line_and_no_traceback() -> None:
    """In a real kernel, as notebook 08's import cell: the error output is the message alone."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(hide(FACES["langgraph"][1])),
        nbformat.v4.new_code_cell("import agentkit\nfrom agentkit.faces import langgraph as lg_face"),
        nbformat.v4.new_code_cell("print('never reached by Run All')"),
    ])
    client = nbclient.NotebookClient(notebook, kernel_name="python3", timeout=60)
    with pytest.raises(nbclient.exceptions.CellExecutionError):
        client.execute()  # Run All stops at the import cell, as in JupyterLab
    [error] = notebook.cells[1].outputs
    assert error.output_type == "error"
    assert error.ename == "MissingFramework"
    [line] = error.traceback
    assert line.startswith("MissingFramework: agentkit.faces.langgraph needs the langgraph framework")
    assert "Traceback" not in line and "File " not in line
    assert notebook.cells[2].outputs == []
