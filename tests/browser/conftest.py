"""Fixtures of the browser suite: one JupyterLab server and one headless Chromium per session.

- ``lab_server``: ``jupyter lab`` from this venv on 127.0.0.1, no token, every Jupyter dir and
  HOME temporary, its root a temporary copy of ``notebooks/`` (running cells never touches the
  stored notebooks). Stopped at the end whatever happens.
- ``browser``: Debian's ``chromium`` driven by Playwright (never ``playwright install``). If it
  is missing every test *fails* with the apt command: CI must not skip the suite silently.
- ``notebooks``: opens a notebook in its own tab, runs all its cells once, and keeps the page
  so the widget tests interact with the widgets the learner got from Run All.

When a test fails, its report gains the JupyterLab server log, the browser console errors of
the pages it used, and a screenshot of each page under ``test-artifacts/failures/``.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from typing import Any

import labdriver as lab
import pytest

_SESSION: dict[str, Any] = {"server": None, "notebooks": None}


@pytest.fixture(scope="session")
def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:  # fail, never skip: CI must not pass without the browser suite
        pytest.fail(lab.CHROMIUM_MISSING, pytrace=False)
    return path


@pytest.fixture(scope="session")
def lab_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[lab.LabServer]:
    work = tmp_path_factory.mktemp("jupyterlab")
    root = lab.copy_notebooks(work / "notebooks")
    server = lab.LabServer(root, work)
    _SESSION["server"] = server
    problem = None
    try:
        server.start()
    except Exception as exc:
        server.stop()
        problem = f"JupyterLab did not start: {exc}"
    if problem:
        pytest.fail(problem, pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def browser(chromium: str) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        problem = None
        try:
            browser = lab.launch_browser(playwright)
        except Exception as exc:
            problem = f"could not launch {chromium} headless: {exc}"
        if problem:
            pytest.fail(problem, pytrace=False)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="session")
def browser_context(browser: Any, lab_server: lab.LabServer) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 1000}, device_scale_factor=1)
    context.set_default_timeout(lab.WIDGET_TIMEOUT * 1000)
    try:
        yield context
    finally:
        context.close()


class Notebooks:
    """Each notebook opened in its own tab and run once per session, on first request."""

    def __init__(self, context: Any, server: lab.LabServer) -> None:
        self.context = context
        self.server = server
        self.pages: dict[str, lab.NotebookPage] = {}
        self.used: list[lab.NotebookPage] = []  # by the current test, for its failure report

    def names(self) -> list[str]:
        return lab.notebook_names(self.server.root_dir)

    def run(self, name: str) -> lab.NotebookPage:
        """The notebook's page after Run All Cells (opened and run on the first call)."""
        nb = self.pages.get(name)
        if nb is None:
            path = self.server.root_dir / name
            if not path.exists():
                pytest.fail(f"{name} is not in notebooks/", pytrace=False)
            nb = lab.open_notebook(self.context, self.server.url, name, lab.read_ipynb(path))
            self.pages[name] = nb
            self.used.append(nb)
            lab.run_all_cells(nb)
        else:
            nb.page.bring_to_front()  # a background tab's timers and frames are throttled
            if nb not in self.used:
                self.used.append(nb)
        return nb

    def close(self, name: str) -> None:
        """Free a tab (and its kernel's page) no later test needs."""
        nb = self.pages.pop(name, None)
        if nb is not None:
            nb.page.close()

    def displaying(self, needle: str, prefer: tuple[str, ...] = ()) -> str:
        """The first notebook (``prefer`` first, then in order) with a code cell containing
        ``needle``, e.g. ``"FailureExplorer("``."""
        names = self.names()
        ordered = [n for p in prefer for n in names if n.startswith(p)] + names
        for name in dict.fromkeys(ordered):
            nb = lab.read_ipynb(self.server.root_dir / name)
            for cell in nb["cells"]:
                src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
                if cell["cell_type"] == "code" and needle in src:
                    return name
        pytest.fail(f"no notebook in notebooks/ has a code cell with {needle!r}", pytrace=False)


@pytest.fixture(scope="session")
def notebooks(browser_context: Any, lab_server: lab.LabServer) -> Notebooks:
    session = Notebooks(browser_context, lab_server)
    _SESSION["notebooks"] = session
    return session


@pytest.fixture(autouse=True)
def _track_pages() -> Iterator[None]:
    session = _SESSION["notebooks"]
    if session is not None:
        session.used = []
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if not report.failed or report.when == "teardown":
        return
    session = _SESSION["notebooks"]
    for nb in list(session.used) if session is not None else []:
        report.sections.append((f"browser console errors: {nb.name}", nb.diagnostics()))
        try:
            slug = re.sub(r"[^\w.-]+", "_", item.name if nb.name in item.name else f"{item.name}-{nb.name}")
            path = lab.ARTIFACTS / "failures" / f"{slug}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            nb.page.screenshot(path=str(path), full_page=True, timeout=10_000)
            report.sections.append((f"screenshot: {nb.name}", str(path)))
        except Exception as exc:  # the page may be the thing that broke
            report.sections.append((f"screenshot: {nb.name}", f"(none: {exc})"))
    server = _SESSION["server"]
    if server is not None:
        report.sections.append(("jupyter server log", server.log_tail()))
