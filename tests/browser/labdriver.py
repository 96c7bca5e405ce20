"""Drive JupyterLab in headless Chromium the way a learner meets the notebooks.

Shared by ``conftest.py`` (the pytest fixtures) and ``screenshot.py`` (the README picture).
Nothing here touches the repository's notebooks: the server's root is a temporary copy.
Every wait is bounded; a timeout says what it was waiting for and what it saw last.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
ARTIFACTS = ROOT / "test-artifacts"
NOTEBOOK_GLOB = "[0-9][0-9]_*.ipynb"

# Debian's chromium, never a browser downloaded by `playwright install`.
CHROMIUM_FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
CHROMIUM_MISSING = (
    "chromium not found on PATH: apt-get install chromium "
    "(the browser suite uses Debian's chromium and never runs `playwright install`)"
)

SERVER_START_TIMEOUT = 60.0  # s, until /api/status answers
PAGE_TIMEOUT = 60.0  # s, until a notebook is open and its kernel idle
RUN_ALL_TIMEOUT = 120.0  # s, per notebook, until every cell has run and the kernel is idle
WIDGET_TIMEOUT = 20.0  # s, per widget interaction

ERROR_MIME = "application/vnd.jupyter.error"
STDERR_MIME = "application/vnd.jupyter.stderr"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


class ChromiumMissing(RuntimeError):
    pass


class LabTimeout(AssertionError):
    """A bounded wait ran out; the message says for what."""


# --------------------------------------------------------------------------- browser


def chromium_path() -> str:
    path = shutil.which("chromium")
    if path is None:
        raise ChromiumMissing(CHROMIUM_MISSING)
    return path


def launch_browser(playwright: Any) -> Any:
    return playwright.chromium.launch(
        executable_path=chromium_path(), headless=True, args=list(CHROMIUM_FLAGS)
    )


# --------------------------------------------------------------------------- server


def copy_notebooks(dest: Path) -> Path:
    """The whole notebooks folder, minus what a run leaves behind (stores, checkpoints)."""
    shutil.copytree(
        NOTEBOOKS,
        dest,
        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", "workspace", "*.sqlite*"),
    )
    return dest


def notebook_names(folder: Path = NOTEBOOKS) -> list[str]:
    return sorted(p.name for p in folder.glob(NOTEBOOK_GLOB))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LabServer:
    """``jupyter lab`` from this venv, on 127.0.0.1, no token, every Jupyter dir temporary."""

    def __init__(self, root_dir: Path, workdir: Path) -> None:
        self.root_dir = root_dir
        self.workdir = workdir
        self.log_path = workdir / "jupyter-server.log"
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_file: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        w = self.workdir
        return [
            sys.executable, "-m", "jupyter", "lab",
            "--no-browser",
            "--allow-root",  # CI runs as root
            "--ip=127.0.0.1",
            f"--port={self.port}",
            "--port-retries=0",
            f"--ServerApp.root_dir={self.root_dir}",
            "--IdentityProvider.token=",
            "--ServerApp.password=",
            "--ServerApp.disable_check_xsrf=True",
            "--ServerApp.terminals_enabled=False",
            f"--LabApp.user_settings_dir={w / 'lab-user-settings'}",
            f"--LabApp.workspaces_dir={w / 'lab-workspaces'}",
            "--LabApp.expose_app_in_browser=True",  # window.jupyterapp, for its commands
            "--LabApp.extension_manager=readonly",  # no PyPI look-ups
            "--LabApp.news_url=None",
        ]

    def environment(self) -> dict[str, str]:
        w = self.workdir
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "JPY_"))}
        env.update(
            HOME=str(w / "home"),
            JUPYTER_CONFIG_DIR=str(w / "jupyter-config"),
            JUPYTER_DATA_DIR=str(w / "jupyter-data"),
            JUPYTER_RUNTIME_DIR=str(w / "jupyter-runtime"),
            IPYTHONDIR=str(w / "ipython"),
            MPLBACKEND="module://matplotlib_inline.backend_inline",
            PYTHONHASHSEED="0",
            PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
        )
        for key in ("HOME", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR"):
            Path(env[key]).mkdir(parents=True, exist_ok=True)
        return env

    def start(self, timeout: float = SERVER_START_TIMEOUT) -> None:
        self.port = free_port()
        self._log_file = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            self.command(),
            cwd=self.root_dir,
            env=self.environment(),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        last = "no answer yet"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"jupyter lab exited with code {self.proc.returncode} before it was ready\n"
                    + self.log_tail()
                )
            try:
                with urllib.request.urlopen(self.url + "/api/status", timeout=2) as r:
                    if r.status == 200:
                        return
                    last = f"HTTP {r.status}"
            except (urllib.error.URLError, OSError) as exc:
                last = repr(exc)
            time.sleep(0.25)
        raise LabTimeout(
            f"jupyter lab did not answer {self.url}/api/status within {timeout:.0f}s "
            f"(last: {last})\n" + self.log_tail()
        )

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def log_tail(self, chars: int = 12_000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as exc:
            return f"(no server log: {exc})"
        head = f"--- jupyter server log ({self.log_path}) ---\n"
        return head + (text if len(text) <= chars else "[...]\n" + text[-chars:])

    def __enter__(self) -> LabServer:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- notebook pages


@dataclass
class CellView:
    """One cell as the page shows it, in notebook order."""

    index: int
    code: bool
    prompt: str
    errors: list[str]
    stderr: list[str]
    widgets: int
    widget_problems: list[str]

    @property
    def execution_count(self) -> int | None:
        text = self.prompt.strip().removeprefix("[").removesuffix("]:")
        return int(text) if text.isdigit() else None


@dataclass
class NotebookPage:
    name: str
    page: Any
    ipynb: dict[str, Any]
    console_errors: list[str] = field(default_factory=list)
    run_seconds: float = 0.0

    @property
    def cells(self) -> list[dict[str, Any]]:
        return self.ipynb["cells"]

    def tags(self, index: int) -> list[str]:
        return list(self.cells[index].get("metadata", {}).get("tags", []))

    def stored_stderr(self, index: int) -> bool:
        return any(
            o.get("output_type") == "stream" and o.get("name") == "stderr"
            for o in self.cells[index].get("outputs", [])
        )

    def diagnostics(self) -> str:
        errs = "\n".join(self.console_errors[-50:]) or "(none)"
        return f"--- browser console errors ({self.name}) ---\n{errs}"


def _attach_console(page: Any, sink: list[str]) -> None:
    def on_console(msg: Any) -> None:
        if msg.type in ("error", "assert"):
            sink.append(f"console.{msg.type}: {msg.text}")

    page.on("console", on_console)
    page.on("pageerror", lambda exc: sink.append(f"pageerror: {exc}"))


def wait_for(page: Any, js: str, what: str, timeout: float, arg: Any = None, status_js: str | None = None) -> Any:
    """``page.wait_for_function`` with a message that says what never happened."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        return page.wait_for_function(js, arg=arg, timeout=timeout * 1000, polling=200)
    except PlaywrightTimeout:
        seen = ""
        if status_js:
            try:
                seen = f" (last seen: {page.evaluate(status_js)})"
            except Exception as exc:  # the page may be gone
                seen = f" (status unavailable: {exc})"
        raise LabTimeout(f"timed out after {timeout:.0f}s waiting for {what}{seen}") from None


KERNEL_STATUS_JS = """() => {
  const app = window.jupyterapp;
  const panel = app && app.shell.currentWidget;
  const ctx = panel && panel.sessionContext;
  if (ctx) {
    const kernel = ctx.session && ctx.session.kernel;
    return {ready: ctx.isReady, status: kernel ? kernel.status : 'no kernel',
            kernelName: ctx.kernelDisplayName, path: panel.context && panel.context.path,
            dialog: !!document.querySelector('.jp-Dialog')};
  }
  const indicator = document.querySelector('.jp-NotebookPanel .jp-Notebook-ExecutionIndicator');
  return {ready: !!indicator, status: indicator ? indicator.getAttribute('data-status') : 'no panel',
          dialog: !!document.querySelector('.jp-Dialog')};
}"""

KERNEL_IDLE_JS = f"() => {{ const s = ({KERNEL_STATUS_JS})(); return s.ready && s.status === 'idle'; }}"

CELLS_JS = f"""() => Array.from(document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell')).map((c, i) => {{
  const texts = (sel) => Array.from(c.querySelectorAll(sel)).map(e => (e.textContent || '').trim());
  const widgetNodes = Array.from(c.querySelectorAll('.jp-OutputArea-output[data-mime-type="{WIDGET_MIME}"]'));
  return {{
    index: i,
    code: c.classList.contains('jp-CodeCell'),
    prompt: ((c.querySelector('.jp-InputArea-prompt') || {{}}).textContent || '').trim(),
    errors: texts('.jp-OutputArea-output[data-mime-type="{ERROR_MIME}"]'),
    stderr: texts('.jp-OutputArea-output[data-mime-type="{STDERR_MIME}"]'),
    widgets: widgetNodes.length,
    widget_problems: widgetNodes.map(e => (e.textContent || '').trim())
        .filter(t => /Error displaying widget|Loading widget|model not found/i.test(t)),
  }};
}})"""

BUSY_CELLS_JS = """() => Array.from(document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-CodeCell .jp-InputArea-prompt'))
  .filter(p => (p.textContent || '').includes('*')).length"""


def open_notebook(context: Any, base_url: str, name: str, ipynb: dict[str, Any], timeout: float = PAGE_TIMEOUT) -> NotebookPage:
    """A new tab on ``/lab/tree/<name>?reset``, returned once its kernel is idle."""
    page = context.new_page()
    nb = NotebookPage(name=name, page=page, ipynb=ipynb)
    _attach_console(page, nb.console_errors)
    page.set_default_timeout(WIDGET_TIMEOUT * 1000)
    page.goto(f"{base_url}/lab/tree/{quote(name)}?reset", wait_until="domcontentloaded", timeout=timeout * 1000)
    wait_for(
        page,
        "() => document.querySelectorAll('.jp-NotebookPanel .jp-Notebook .jp-Cell').length > 0",
        f"{name} to open in JupyterLab",
        timeout,
    )
    wait_for(page, KERNEL_IDLE_JS, f"the kernel of {name} to be idle", timeout, status_js=KERNEL_STATUS_JS)
    return nb


def run_all_cells(nb: NotebookPage, timeout: float = RUN_ALL_TIMEOUT) -> list[CellView]:
    """Run → Run All Cells, then wait until no cell is queued and the kernel is idle."""
    page = nb.page
    started = time.monotonic()
    has_app = page.evaluate("() => !!(window.jupyterapp && window.jupyterapp.commands)")
    if has_app:
        page.evaluate(
            """() => { window.__agentkitRunAll = null;
                window.jupyterapp.commands.execute('notebook:run-all-cells').then(
                  (r) => { window.__agentkitRunAll = {done: true, result: r}; },
                  (e) => { window.__agentkitRunAll = {done: true, error: String(e)}; }); }"""
        )
        wait_for(
            page,
            "() => window.__agentkitRunAll && window.__agentkitRunAll.done",
            f"'notebook:run-all-cells' to finish in {nb.name}",
            timeout,
            status_js=BUSY_CELLS_JS.replace("=> Array", "=> 'cells still running: ' + Array"),
        )
        outcome = page.evaluate("() => window.__agentkitRunAll")
        if outcome.get("error"):
            raise AssertionError(f"run-all-cells failed in {nb.name}: {outcome['error']}")
    else:  # the learner's way: the Run menu
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    remaining = max(5.0, timeout - (time.monotonic() - started))
    wait_for(
        page,
        f"() => ({BUSY_CELLS_JS})() === 0 && ({KERNEL_IDLE_JS})()",
        f"every cell of {nb.name} to finish and the kernel to be idle",
        remaining,
        status_js=KERNEL_STATUS_JS,
    )
    nb.run_seconds = time.monotonic() - started
    return read_cells(nb)


def read_cells(nb: NotebookPage) -> list[CellView]:
    return [CellView(**c) for c in nb.page.evaluate(CELLS_JS)]


def problems(nb: NotebookPage, views: list[CellView]) -> list[str]:
    """What a learner would see go wrong after Run All: one line per problem, empty if none."""
    found: list[str] = []
    if len(views) != len(nb.cells):
        found.append(f"the page shows {len(views)} cells, the .ipynb has {len(nb.cells)}")
        return found
    for view, cell in zip(views, nb.cells):
        i = view.index
        where = f"cell {i} ({cell['cell_type']}: {''.join(cell['source'])[:60]!r})"
        if cell["cell_type"] != "code":
            continue
        allowed = "raises-exception" in nb.tags(i)
        if view.execution_count is None and "".join(cell["source"]).strip():
            found.append(f"{where} did not run (prompt {view.prompt!r})")
        if view.errors and not allowed:
            found.append(f"{where} shows an error output:\n{_indent(view.errors[0][-1500:])}")
        if view.stderr and not allowed and not nb.stored_stderr(i):
            found.append(f"{where} writes to stderr (the stored notebook does not):\n{_indent(view.stderr[0][-1500:])}")
        for text in view.widget_problems:
            found.append(f"{where} shows a widget that did not render: {text[:200]!r}")
        stored_widgets = sum(WIDGET_MIME in o.get("data", {}) for o in cell.get("outputs", []))
        if stored_widgets and not view.widgets:
            found.append(f"{where} displays no widget (the stored notebook displays {stored_widgets})")
    return found


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


def read_ipynb(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def shot(locator: Any, name: str, folder: Path = ARTIFACTS) -> Path:
    """A screenshot of one element, kept as a test artefact."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    locator.scroll_into_view_if_needed()
    locator.screenshot(path=str(path), animations="disabled")
    return path
