"""Where the demo's data lives: the corpus notes and ``failure_matrix.csv``.

The files stay in the repository's top-level ``data/`` folder, where learners browse them;
``pyproject.toml`` maps that folder to the package ``agentkit.data``, so a wheel carries them
and an editable checkout reads them in place. Both cases resolve through
:mod:`importlib.resources`, never through a path relative to this file.
"""

from __future__ import annotations

from importlib.resources import as_file, files
from pathlib import Path

__all__ = ["data_path"]


def data_path(*parts: str) -> Path:
    """The file system path of ``data/<parts…>`` as installed (wheel or editable checkout)."""
    resource = files("agentkit.data").joinpath(*parts)
    # Installed packages are plain folders on disk; as_file() then returns the path itself
    # without copying, and the context manager's exit does nothing.
    with as_file(resource) as path:
        return Path(path)
