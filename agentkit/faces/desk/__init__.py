"""The approvals desk: a web page where a person answers approvals (docs/design.md#approvals-desk).

``python -m agentkit desk`` (:mod:`~agentkit.faces.desk.command`; the ``desk`` extra:
Starlette and uvicorn) serves a page on the loopback that lists every approval waiting in a
store — from the runner, ``serve-mcp``, a notebook, a DBOS or Temporal workflow — with the
evidence a person needs to decide it (:mod:`~agentkit.faces.desk.view`), and the calls in
doubt. Approve and Deny are exactly the CLI's decisions
(:func:`agentkit.faces.approvals_command.decision`): the desk decides nothing the CLI does
not. Who may use it is :mod:`~agentkit.faces.desk.auth`; the pages and their headers are
:mod:`~agentkit.faces.desk.app`, the HTML in ``templates/`` and the style and script in
``static/``.
"""

from __future__ import annotations

__all__ = ["create_app"]


def __getattr__(name: str) -> object:
    if name == "create_app":  # Starlette is imported when the desk is used, not before
        from agentkit.faces.desk.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
