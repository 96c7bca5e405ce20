"""Drive JupyterLab in headless Chromium the way a learner meets the notebooks.

Shared by ``conftest.py`` (the pytest fixtures) and ``screenshot.py`` (the README picture).
Nothing here touches the repository's notebooks: the server's root is a temporary copy.
Every wait is bounded; a timeout says what it was waiting for and what it saw last.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:
    from typing_extensions import Self

ROOT = Path(__file__).resolve().parents[2]
# The notebooks to copy and drive; another folder only to try the harness itself on a
# doctored copy (say, with a widget cell broken on purpose).
NOTEBOOKS = Path(os.environ.get("AGENTKIT_BROWSER_NOTEBOOKS") or ROOT / "notebooks").resolve()
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


try:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
except ImportError:  # only the fixtures need playwright; `make test` merely collects this suite
    class PlaywrightTimeout(Exception):  # type: ignore[no-redef]
        pass


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

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- notebook pages
#
# Verified against JupyterLab 4.6: an error output and a stderr stream both render as
# `.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]` (there is no
# `application/vnd.jupyter.error` node), and a widget renders as a `.jp-OutputArea-output`
# without data-mime-type holding a `.jupyter-widgets` view (both error selectors are kept,
# should a later JupyterLab mark errors apart). So the page's DOM says what the learner sees,
# and the page's live notebook model (window.jupyterapp, exposed by the server flag) says
# which red box is an exception and which is a stderr stream.


@dataclass
class CellView:
    """One cell as the page shows it after Run All, in notebook order."""

    index: int
    cell_type: str
    prompt: str  # "[3]:", "[*]:", "[ ]:" or "" for markdown
    red: list[str]  # text of every stderr-styled output node (errors and stderr streams)
    errors: list[str]  # "Ename: evalue" of each error output in the live model
    stderr: list[str]  # text of each stderr stream output in the live model
    widget_outputs: int  # widget-view outputs in the live model
    widget_views: int  # rendered `.jupyter-widgets` views in the DOM
    widget_problems: list[str]  # "Error displaying widget ..." texts

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
    views: list[CellView] = field(default_factory=list)

    @property
    def cells(self) -> list[dict[str, Any]]:
        return self.ipynb["cells"]

    def source(self, index: int) -> str:
        src = self.cells[index]["source"]
        return src if isinstance(src, str) else "".join(src)

    def tags(self, index: int) -> list[str]:
        return list(self.cells[index].get("metadata", {}).get("tags", []))

    def may_raise(self) -> list[int]:
        return [i for i in range(len(self.cells)) if "raises-exception" in self.tags(i)]

    def must_run(self) -> list[int]:
        return [i for i, c in enumerate(self.cells) if c["cell_type"] == "code" and self.source(i).strip()]

    def stored_stderr(self, index: int) -> bool:
        return any(
            o.get("output_type") == "stream" and o.get("name") == "stderr"
            for o in self.cells[index].get("outputs", [])
        )

    def find_cell(self, needle: str) -> int:
        """Index of the first code cell whose source contains ``needle``."""
        for i, cell in enumerate(self.cells):
            if cell["cell_type"] == "code" and needle in self.source(i):
                return i
        raise LookupError(f"no code cell of {self.name} contains {needle!r}")

    def diagnostics(self) -> str:
        errs = "\n".join(self.console_errors[-50:]) or "(none)"
        return f"--- browser console errors ({self.name}) ---\n{errs}"


PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"


def _attach_console(page: Any, sink: list[str]) -> None:
    def on_console(msg: Any) -> None:
        if msg.type in ("error", "assert"):
            sink.append(f"console.{msg.type}: {msg.text}")

    page.on("console", on_console)
    page.on("pageerror", lambda exc: sink.append(f"pageerror: {exc}"))


def wait_for(page: Any, js: str, what: str, timeout: float, arg: Any = None, status_js: str | None = None) -> Any:
    """``page.wait_for_function`` with a message that says what never happened."""
    try:
        return page.wait_for_function(js, arg=arg, timeout=timeout * 1000, polling=200)
    except PlaywrightTimeout:
        raise LabTimeout(f"timed out after {timeout:.0f}s waiting for {what}{_seen(page, status_js)}") from None


def _seen(page: Any, status_js: str | None) -> str:
    if not status_js:
        return ""
    try:
        return f" (last seen: {page.evaluate(status_js)})"
    except Exception as exc:  # the page may be gone
        return f" (status unavailable: {exc})"


KERNEL_STATUS_JS = """() => {
  const app = window.jupyterapp;
  const panel = app && app.shell.currentWidget;
  const ctx = panel && panel.sessionContext;
  const dialog = document.querySelector('.jp-Dialog');
  const dialogText = dialog ? (dialog.textContent || '').trim().slice(0, 200) : null;
  if (ctx) {
    const kernel = ctx.session && ctx.session.kernel;
    return {ready: ctx.isReady, status: kernel ? kernel.status : 'no kernel',
            kernel: ctx.kernelDisplayName, path: panel.context && panel.context.path, dialog: dialogText};
  }
  const indicator = document.querySelector('PANEL .jp-Notebook-ExecutionIndicator');
  return {ready: !!indicator, status: indicator ? indicator.getAttribute('data-status') : 'no notebook panel',
          dialog: dialogText};
}""".replace("PANEL", PANEL)

KERNEL_IDLE_JS = f"() => {{ const s = ({KERNEL_STATUS_JS})(); return s.ready && s.status === 'idle'; }}"

CELLS_JS = """() => {
  const app = window.jupyterapp;
  const current = app && app.shell.currentWidget;
  const model = current && current.content && current.content.model;
  const nodes = Array.from(document.querySelectorAll('PANEL .jp-Notebook .jp-Cell'));
  return nodes.map((c, i) => {
    const texts = (sel) => Array.from(c.querySelectorAll(sel)).map(e => (e.textContent || '').trim());
    const red = texts('.jp-OutputArea-output[data-mime-type="STDERR"], .jp-OutputArea-output[data-mime-type="ERROR"]');
    let outputs = null;
    if (model && i < model.cells.length) {
      const json = model.cells.get(i).toJSON();
      outputs = json.outputs || [];
    }
    const errors = outputs ? outputs.filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue)
                           : red.filter(t => /Traceback \\(most recent call last\\)|^\\w+(Error|Exception)\\b/.test(t));
    const stderr = outputs ? outputs.filter(o => o.output_type === 'stream' && o.name === 'stderr')
                                    .map(o => Array.isArray(o.text) ? o.text.join('') : o.text)
                           : red.filter(t => !errors.includes(t));
    const widgetOutputs = outputs ? outputs.filter(o => o.data && o.data['WIDGET']).length : 0;
    const views = Array.from(c.querySelectorAll('.jp-OutputArea-output'))
                       .filter(o => o.querySelector(':scope > .jupyter-widgets')).length;
    return {
      index: i,
      cell_type: c.classList.contains('jp-CodeCell') ? 'code' : (c.classList.contains('jp-MarkdownCell') ? 'markdown' : 'raw'),
      prompt: ((c.querySelector('.jp-InputArea-prompt') || {}).textContent || '').trim(),
      red: red, errors: errors, stderr: stderr,
      widget_outputs: widgetOutputs, widget_views: views,
      widget_problems: texts('.jp-OutputArea-output').filter(t => /Error displaying widget|model not found/i.test(t)),
    };
  });
}""".replace("PANEL", PANEL).replace("STDERR", STDERR_MIME).replace("ERROR", ERROR_MIME).replace("WIDGET", WIDGET_MIME)


def open_notebook(context: Any, base_url: str, name: str, ipynb: dict[str, Any], timeout: float = PAGE_TIMEOUT) -> NotebookPage:
    """A new tab on ``/lab/tree/<name>?reset``, returned once its kernel is idle."""
    page = context.new_page()
    nb = NotebookPage(name=name, page=page, ipynb=ipynb)
    _attach_console(page, nb.console_errors)
    page.set_default_timeout(WIDGET_TIMEOUT * 1000)
    page.goto(f"{base_url}/lab/tree/{quote(name)}?reset", wait_until="domcontentloaded", timeout=timeout * 1000)
    wait_for(
        page,
        f"() => document.querySelectorAll('{PANEL} .jp-Notebook .jp-Cell').length > 0",
        f"{name} to open in JupyterLab",
        timeout,
    )
    wait_for(page, KERNEL_IDLE_JS, f"the kernel of {name} to be idle", timeout, status_js=KERNEL_STATUS_JS)
    return nb


PROMPTS_JS = f"""() => Array.from(document.querySelectorAll('{PANEL} .jp-Notebook .jp-CodeCell .jp-InputArea-prompt'))
  .map(p => (p.textContent || '').trim())"""


def _command(nb: NotebookPage, command: str, menu: str, item: str) -> None:
    """A JupyterLab command, through ``window.jupyterapp`` when exposed, else the menu bar."""
    page = nb.page
    if page.evaluate("() => !!(window.jupyterapp && window.jupyterapp.commands)"):
        # Not awaited here: the caller waits, with a deadline, for what the command does.
        page.evaluate("(id) => { window.jupyterapp.commands.execute(id); }", command)
    else:  # the learner's way
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(rf"^{menu}$")).first.click()
        page.locator(".lm-Menu-item:not(.lm-mod-disabled) .lm-Menu-itemLabel",
                     has_text=re.compile(rf"^{re.escape(item)}$")).first.click()


def _start_run_all(nb: NotebookPage, timeout: float) -> None:
    """Edit → Clear Outputs of All Cells (so every execution count seen later is from this
    run, not the stored one), then Run → Run All Cells, and wait for the run to start."""
    page = nb.page
    _command(nb, "notebook:clear-all-cell-outputs", "Edit", "Clear Outputs of All Cells")
    wait_for(page, f"() => ({PROMPTS_JS})().every(t => !/\\d/.test(t))",
             f"the stored outputs of {nb.name} to clear", timeout,
             status_js=f"() => 'prompts: ' + ({PROMPTS_JS})().join(' ')")
    started = f"() => ({PROMPTS_JS})().some(t => /[*\\d]/.test(t))"
    for attempt in (1, 2):  # a menu opened while the page still settles can miss its click
        _command(nb, "notebook:run-all-cells", "Run", "Run All Cells")
        try:
            wait_for(page, started, f"Run All Cells to start in {nb.name}", min(timeout, 15.0))
            return
        except LabTimeout:
            if attempt == 2:
                raise
            page.keyboard.press("Escape")


def run_all_cells(nb: NotebookPage, timeout: float = RUN_ALL_TIMEOUT, settle: float = 1.0) -> list[CellView]:
    """Run → Run All Cells; wait until the run is over; return what every cell shows.

    Over means: the kernel is idle, no prompt reads ``[*]``, and either every non-empty code
    cell shows an execution count or an exception outside a ``raises-exception`` cell has
    stopped the run -- steadily for ``settle`` seconds (JupyterLab resets the prompts of queued
    cells once a ``raises-exception`` cell fails while the kernel still runs them, and the
    kernel is briefly idle between two cells).
    """
    page = nb.page
    started = time.monotonic()
    deadline = started + timeout
    _start_run_all(nb, timeout)
    must_run, may_raise = set(nb.must_run()), set(nb.may_raise())
    steady_since: float | None = None
    last = ""
    while True:
        idle = page.evaluate(KERNEL_IDLE_JS)
        views = read_cells(nb)
        busy = [v.index for v in views if "*" in v.prompt]
        missing = [i for i in sorted(must_run) if i >= len(views) or views[i].execution_count is None]
        stopped = [v.index for v in views if v.errors and v.index not in may_raise]
        over = idle and not busy and (not missing or stopped)
        last = f"kernel idle={idle}, running={busy}, not yet run={missing[:10]}, stopped by error in={stopped}"
        now = time.monotonic()
        if over:
            steady_since = steady_since or now
            if now - steady_since >= settle:
                break
        else:
            steady_since = None
        if now > deadline:
            raise LabTimeout(f"timed out after {timeout:.0f}s waiting for Run All Cells in {nb.name} ({last})")
        time.sleep(0.2)
    nb.run_seconds = time.monotonic() - started
    _wait_widgets_rendered(nb, max(5.0, deadline - time.monotonic()))
    nb.views = read_cells(nb)
    return nb.views


def run_cell(nb: NotebookPage, index: int, timeout: float = RUN_ALL_TIMEOUT) -> CellView:
    """Run one cell, as a learner does with Shift+Enter on it (the notebook's cell ``index``
    made active, then Run → Run Selected Cell, which here does not move on), and wait until it
    has run: a new execution count and the kernel idle. Returns the cell as the page shows it."""
    page = nb.page
    before = read_cells(nb)[index].execution_count
    page.evaluate("(i) => { const nb = window.jupyterapp.shell.currentWidget.content;"
                  " nb.activeCellIndex = i; nb.deselectAll(); }", index)
    _command(nb, "notebook:run-cell", "Run", "Run Selected Cell and Do not Advance")
    prompt = f"() => ((document.querySelectorAll('{PANEL} .jp-Notebook .jp-Cell')[{index}]"
    prompt += ".querySelector('.jp-InputArea-prompt') || {}).textContent || '').trim()"
    done = (f"() => {{ const t = ({prompt})(); const n = parseInt(t.replace(/[^0-9]/g, ''));"
            f" return !t.includes('*') && !isNaN(n) && n !== {before if before is not None else -1}; }}")
    wait_for(page, done, f"cell {index} of {nb.name} to run", timeout, status_js=prompt)
    wait_for(page, KERNEL_IDLE_JS, f"the kernel of {nb.name} to be idle", timeout, status_js=KERNEL_STATUS_JS)
    return read_cells(nb)[index]


def cell_text(nb: NotebookPage, index: int) -> str:
    """The text of a cell's outputs as the page shows them."""
    cell = nb.page.locator(f"{PANEL} .jp-Notebook .jp-Cell").nth(index)
    return cell.locator(".jp-OutputArea").inner_text()


def _wait_widgets_rendered(nb: NotebookPage, timeout: float) -> None:
    """Widget views render after their display message; give them a bounded moment."""
    deadline = time.monotonic() + min(timeout, WIDGET_TIMEOUT)
    while time.monotonic() < deadline:
        if all(v.widget_views >= v.widget_outputs or v.widget_problems for v in read_cells(nb)):
            return
        time.sleep(0.2)


def read_cells(nb: NotebookPage) -> list[CellView]:
    return [CellView(**c) for c in nb.page.evaluate(CELLS_JS)]


def problems(nb: NotebookPage, views: list[CellView] | None = None) -> list[str]:
    """What a learner would see go wrong after Run All: one line per problem, empty if none."""
    views = nb.views if views is None else views
    if len(views) != len(nb.cells):
        return [f"the page shows {len(views)} cells, {nb.name} has {len(nb.cells)}"]
    found: list[str] = []
    for view, cell in zip(views, nb.cells, strict=True):  # lengths checked just above
        i = view.index
        where = f"cell {i} ({nb.source(i).strip().splitlines()[0][:70] if nb.source(i).strip() else ''!r})"
        if view.cell_type != cell["cell_type"]:
            found.append(f"{where}: the page shows a {view.cell_type} cell, the .ipynb a {cell['cell_type']} cell")
            continue
        if cell["cell_type"] != "code":
            continue
        allowed = "raises-exception" in nb.tags(i)
        if view.execution_count is None and i in nb.must_run():
            found.append(f"{where} did not run (prompt {view.prompt!r})")
        if view.errors and not allowed:
            shown = next((t for t in view.red if t), view.errors[0])
            found.append(f"{where} shows an error: {view.errors[0]}\n{_indent(shown[-2000:])}")
        if view.stderr and not allowed and not nb.stored_stderr(i):
            found.append(f"{where} writes to stderr (the stored notebook does not):\n{_indent(view.stderr[0][-1500:])}")
        for text in view.widget_problems:
            found.append(f"{where} shows a widget that did not render: {text[:300]!r}")
        if view.widget_views < view.widget_outputs:
            found.append(f"{where} displays {view.widget_outputs} widget(s) but {view.widget_views} rendered")
        stored = sum(WIDGET_MIME in o.get("data", {}) for o in cell.get("outputs", []))
        if stored and not view.widget_outputs:
            found.append(f"{where} displays no widget (the stored notebook displays {stored})")
    # An uncaught exception in the page (a widget view that crashed, say); console.error lines
    # are only reported with a failure, some are JupyterLab's own noise.
    found += [f"the page raised: {e.removeprefix('pageerror: ')}" for e in nb.console_errors if e.startswith("pageerror:")]
    return found


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


def read_ipynb(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- widgets


def widget_root(nb: NotebookPage, css: str, timeout: float = WIDGET_TIMEOUT) -> Any:
    """The first rendered widget whose root has the CSS class ``css``, scrolled into view."""
    root = nb.page.locator(f"{PANEL} .jp-OutputArea-output .{css}").first
    root.wait_for(state="attached", timeout=timeout * 1000)
    root.scroll_into_view_if_needed()
    return root


def dropdown(root: Any, description: str) -> Any:
    """The ``<select>`` of the ipywidgets Dropdown whose ``<label>`` reads ``description``."""
    label = root.page.locator("label.widget-label", has_text=re.compile(rf"^\s*{re.escape(description)}\s*$"))
    return root.locator(".widget-dropdown").filter(has=label).locator("select").first


def choose(root: Any, description: str, option_text: str) -> None:
    """Pick an option by the text a learner reads (ipywidgets renders its spaces as &nbsp;)."""
    from playwright.sync_api import expect

    select = dropdown(root, description)
    texts = [t.replace("\xa0", " ").strip() for t in select.locator("option").all_text_contents()]
    assert option_text in texts, f"the {description!r} dropdown offers {texts}, not {option_text!r}"
    index = texts.index(option_text)
    select.select_option(index=index)
    expect(select).to_have_value(select.locator("option").nth(index).get_attribute("value") or "")


def button(root: Any, name: str) -> Any:
    """The ipywidgets Buttons inside ``root`` whose text is ``name``."""
    return root.locator("button.widget-button").filter(has_text=re.compile(rf"^\s*{re.escape(name)}\s*$"))


def shot(locator: Any, name: str, folder: Path = ARTIFACTS) -> Path:
    """A screenshot of one element, kept as a test artefact."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    locator.scroll_into_view_if_needed()
    locator.screenshot(path=str(path), animations="disabled")
    return path
