"""A room without network: `make wheelhouse` on a connected machine, then `make lab` and
`make frameworks` with pip's network blocked, as INSTRUCTOR.md tells an instructor to do.

One run, in a copy of the repository (so this checkout gets no wheels/ and no second venv):

1. ``make wheelhouse`` with the network, as on the instructor's connected machine;
2. with pip cut off from every index (no configuration file, no ``PIP_*`` settings of this
   machine, every proxy variable pointing at a closed port, no retries), ``make lab-install``
   into a fresh venv must succeed from the wheelhouse alone, and the same pip must fail to
   reach PyPI (so the block is real);
3. the learners' venv runs the notebooks' imports, holds no developer tool, and stays within
   the size goal; ``make frameworks`` adds notebook 08's frameworks, offline too.

Slow (a venv, a wheelhouse, two installs: a few minutes from a warm pip cache), so it is
marked ``offline`` and run by ``make test-offline``, never by ``make test``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: What `make lab` reads from the repository.
INPUTS = ("Makefile", "pyproject.toml", "README.md", "agentkit", "data", "jupyter-config")
IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
#: The learners' venv, at most (docs: INSTRUCTOR.md, "Before the session").
MAX_LAB_MEGABYTES = 600
DEVELOPER_TOOLS = ("mypy", "ruff", "playwright", "pytest", "hypothesis", "nbval", "anthropic")
CLOSED = "http://127.0.0.1:9"  # the discard port: nothing listens, a connection is refused

pytestmark = [
    pytest.mark.offline,
    pytest.mark.skipif(shutil.which("make") is None, reason="needs make"),
]


def blocked_env() -> dict[str, str]:
    """This process's environment, with pip cut off from the network and from this machine's
    own pip configuration (its local indexes and wheel folders would hide a missing wheel)."""
    env = {k: v for k, v in os.environ.items()
           if not k.upper().startswith("PIP_") and "PROXY" not in k.upper()}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        env[name] = CLOSED
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_RETRIES="0", PIP_TIMEOUT="3",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def run(command: list[str], cwd: Path, env: dict[str, str] | None = None,
        timeout: int = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def megabytes(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()) / 1e6


@pytest.fixture(scope="module")
def room(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the repository with a wheelhouse built on the connected machine."""
    repo = tmp_path_factory.mktemp("room")
    for name in INPUTS:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, repo / name, ignore=IGNORED)
        else:
            shutil.copy2(path, repo / name)
    built = run(["make", "wheelhouse", f"PYTHON={sys.executable}"], cwd=repo)
    assert built.returncode == 0, f"make wheelhouse failed:\n{built.stdout}\n{built.stderr}"
    assert any((repo / "wheels").glob("setuptools-*.whl"))
    return repo


def test_make_lab_installs_from_the_wheelhouse_with_the_network_blocked(room: Path) -> None:
    env = blocked_env()
    venv = room / ".venv-room"
    # The block is real: the same pip, with the same settings, cannot reach an index.
    probe = run([sys.executable, "-m", "pip", "download", "--no-deps", "--dest",
                 str(room / "probe"), "six"], cwd=room, env=env, timeout=120)
    assert probe.returncode != 0, "pip reached an index: the network is not blocked"

    installed = run(["make", "lab-install", f"VENV={venv.name}", f"PYTHON={sys.executable}"],
                    cwd=room, env=env)
    assert installed.returncode == 0, f"offline make lab failed:\n{installed.stdout}\n{installed.stderr}"
    assert (venv / ".installed-lab").exists()

    python = str(venv / "bin" / "python")
    imports = run([python, "-c", "import agentkit, ipykernel, ipywidgets, jupyterlab, matplotlib, "
                   "mcp, opentelemetry.sdk, pandas; from agentkit.faces import widgets; "
                   "import importlib.metadata as m; m.version('agentkit-boundary')"],
                  cwd=room / "data", env=env)
    assert imports.returncode == 0, imports.stderr
    found = run([python, "-c", "import importlib.util as u, sys; "
                 "print(' '.join(m for m in sys.argv[1:] if u.find_spec(m)))", *DEVELOPER_TOOLS],
                cwd=room / "data", env=env)
    assert found.stdout.split() == [], f"developer tools in the learners' venv: {found.stdout}"
    size = megabytes(venv)
    assert size <= MAX_LAB_MEGABYTES, f"the learners' venv is {size:.0f} MB (goal {MAX_LAB_MEGABYTES})"

    frameworks = run(["make", "frameworks", f"VENV={venv.name}", f"PYTHON={sys.executable}"],
                     cwd=room, env=env)
    assert frameworks.returncode == 0, f"offline make frameworks failed:\n{frameworks.stderr}"
    imported = run([python, "-c", "import agents, pydantic_ai, langgraph; "
                    "from agentkit.faces import langgraph, openai_agents, pydantic_ai"],
                   cwd=room / "data", env=env)
    assert imported.returncode == 0, imported.stderr
