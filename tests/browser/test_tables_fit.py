"""What a learner reads fits the page: at 1,280 px with JupyterLab's file browser open (its
default layout), after Run All Cells.

- No output of the notebooks with tables scrolls sideways (09's span table, 05's matrix, 07's
  audit tables, 08's and 10's tables), and no pandas cell is cut with "..." (08, 10).
- Feedback, the explorer's "why:" line and the stepper's JSON wrap between words, never
  inside one ("outc|ome_unknown"), and a checker's Correct and Incorrect differ in colour.
"""

from __future__ import annotations

import labdriver as lab
import pytest

pytestmark = pytest.mark.browser

#: The notebooks that show tables (pandas frames, Stylers, the widgets' own tables).
TABLES = ("05_failure_matrix.ipynb", "07_your_own_tool.ipynb", "08_your_framework.ipynb",
          "09_traces.ipynb", "10_durable_agents.ipynb")

#: Every output box that scrolls sideways: [cell index, content width, box width, first words].
OVERFLOWING_JS = """() => {
  const cells = [...document.querySelectorAll('PANEL .jp-Notebook .jp-Cell')];
  const found = [];
  cells.forEach((cell, i) => cell.querySelectorAll('.jp-OutputArea-output').forEach(o => {
    if (o.scrollWidth > o.clientWidth + 1)
      found.push([i, o.scrollWidth, o.clientWidth, (o.innerText || '').trim().slice(0, 60)]);
  }));
  return found;
}""".replace("PANEL", lab.PANEL)

#: Every table cell pandas cut short: [cell index, its text].
CUT_JS = """() => {
  const cells = [...document.querySelectorAll('PANEL .jp-Notebook .jp-Cell')];
  const found = [];
  cells.forEach((cell, i) => cell.querySelectorAll('.jp-OutputArea-output td').forEach(td => {
    const text = (td.innerText || '').trim();
    if (text.endsWith('...') || text.endsWith('…')) found.push([i, text]);
  }));
  return found;
}""".replace("PANEL", lab.PANEL)


def test_the_page_is_1280_px_wide_with_the_file_browser_open(notebooks):
    nb = notebooks.run(TABLES[0])
    width = nb.page.evaluate("() => window.innerWidth")
    assert width == 1280, width
    browser = nb.page.locator(".jp-FileBrowser").first
    assert browser.is_visible(), "JupyterLab's file browser should be open, as a learner first sees it"
    assert (browser.bounding_box() or {}).get("width", 0) > 150


@pytest.mark.parametrize("name", TABLES)
def test_every_output_fits_and_no_table_cell_is_cut(notebooks, name):
    nb = notebooks.run(name)
    assert not lab.problems(nb), lab.problems(nb)
    assert nb.page.locator(".jp-FileBrowser").first.is_visible()
    overflowing = nb.page.evaluate(OVERFLOWING_JS)
    assert not overflowing, f"{name}: outputs that scroll sideways [cell, needs px, has px, text]: {overflowing}"
    cut = nb.page.evaluate(CUT_JS)
    assert not cut, f"{name}: table cells pandas cut short: {cut}"


def _copy(notebooks, name: str, new_name: str, edit) -> str:
    """A doctored copy of ``name`` in the server's folder (never the repository's notebook),
    named outside the lessons' ``NN_*.ipynb`` pattern so no other test picks it up."""
    import json

    root = notebooks.server.root_dir
    ipynb = json.loads((root / name).read_text(encoding="utf-8"))
    edit(ipynb)
    (root / new_name).write_text(json.dumps(ipynb), encoding="utf-8")
    return new_name


def test_the_stored_matrix_table_keeps_its_layout_before_the_notebook_is_trusted(notebooks, lab_server):
    """A fresh clone's notebook is not trusted: JupyterLab drops a Styler's ``<style>`` from its
    stored outputs. 05's stored table must keep its layout (inline styles: headers at the foot
    of their cells, numbers on one line, labels wrapped only between words) and fit."""
    name = _copy(notebooks, "05_failure_matrix.ipynb", "untrusted_05.ipynb", lambda ipynb: None)
    nb = lab.open_notebook(notebooks.context, lab_server.url, name, lab.read_ipynb(lab_server.root_dir / name))
    try:
        index = nb.find_cell("matrix.run_matrix(workdir")
        table = nb.page.locator(f"{lab.PANEL} .jp-Notebook .jp-Cell").nth(index).locator("table").first
        table.scroll_into_view_if_needed()
        header = table.locator("thead th").first
        # The inline styles survive JupyterLab's sanitizer (all but `position: sticky`, which
        # a table keeps once it is trusted or re-run): headers at the bottom of their cells.
        assert header.evaluate("th => getComputedStyle(th).verticalAlign") == "bottom"
        last = table.locator("tbody tr").last.locator("td")
        label = last.first
        assert (label.inner_text() or "").split() == ["killed", "after", "payment", "key", "not", "forwarded"]
        assert label.evaluate("td => getComputedStyle(td).overflowWrap") == "break-word"  # never mid-word
        assert last.nth(4).evaluate("td => getComputedStyle(td).whiteSpace") == "nowrap"  # handler calls
        scroll, room = table.evaluate(
            "t => { const o = t.closest('.jp-OutputArea-output'); return [o.scrollWidth, o.clientWidth]; }")
        assert scroll <= room + 1, f"the stored matrix table needs {scroll} px in {room} px"
        shaded = table.locator("td[style*='background-color']").count()
        assert shaded == 0, "every stored row passes: none is shaded"
    finally:
        nb.page.close()


def test_notebook_10_without_the_engines_says_make_frameworks_in_one_line(notebooks):
    """After `make lab` alone: DBOS and Temporal are missing. The first code cell says what
    to install in one line, no traceback, and Run All stops there."""
    def hide_engines(ipynb):
        hide = "import sys\nsys.modules['dbos'] = None\nsys.modules['temporalio'] = None  # as after `make lab`"
        ipynb["cells"].insert(0, {"cell_type": "code", "execution_count": None, "metadata": {},
                                  "outputs": [], "source": hide})

    name = _copy(notebooks, "10_durable_agents.ipynb", "without_engines_10.ipynb", hide_engines)
    nb = notebooks.run(name)
    try:
        stopped = [v for v in nb.views if v.errors]
        assert len(stopped) == 1, [(v.index, v.errors) for v in stopped]
        [view] = stopped
        assert "import agentkit.faces.dbos" in nb.source(view.index)
        [error] = view.errors
        assert error.startswith("MissingFramework: agentkit.faces.dbos needs the dbos engine"), error
        assert "`make frameworks`" in error
        [shown] = [text.strip() for text in view.red if text.strip()]
        assert "Traceback" not in shown and len(shown.splitlines()) == 1, shown
        later = [v.index for v in nb.views if v.index > view.index and v.execution_count is not None]
        assert later == [], f"cells ran after the missing engine: {later}"
    finally:
        notebooks.close(name)


def test_notebook_10_shows_the_workers_error_when_it_fails(notebooks):
    """A worker that dies before it says anything: its cell shows the worker's own stderr,
    not a blank line, and the next cells never read an empty line."""
    def break_worker(ipynb):
        for cell in ipynb["cells"]:
            source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            if source.startswith("%%writefile workspace/10/worker.py"):
                cell["source"] = source.replace("CRASH = sys.argv[1]", "raise SystemExit('worker cannot start: no ledger disk')\nCRASH = sys.argv[1]", 1)
                return
        raise AssertionError("no worker cell in notebook 10")

    name = _copy(notebooks, "10_durable_agents.ipynb", "broken_worker_10.ipynb", break_worker)
    nb = notebooks.run(name)
    try:
        index = nb.find_cell('worker = start_worker("crash")')
        view = nb.views[index]
        [error] = view.errors
        assert error.startswith("WorkerFailed: the crash worker stopped (exit status 1)"), error
        shown = "\n".join(view.red)
        assert "worker cannot start: no ledger disk" in shown and "Traceback" not in shown, shown
        assert [v.index for v in nb.views if v.errors] == [index], "Run All stops at the worker's error"
    finally:
        notebooks.close(name)


def _set_source(nb, index: int, source: str) -> None:
    """Replace a cell's code as a learner's paste would (through the live notebook model)."""
    nb.page.evaluate(
        "([i, s]) => window.jupyterapp.shell.currentWidget.content.widgets[i].model.sharedModel.setSource(s)",
        [index, source])


VERDICT_JS = """(i) => {
  const cell = document.querySelectorAll('PANEL .jp-Notebook .jp-Cell')[i];
  const pre = cell.querySelector('.jp-OutputArea-output pre.agentkit-verdict');
  if (!pre) return null;
  const s = getComputedStyle(pre);
  return {text: pre.innerText, color: s.color, wordBreak: s.wordBreak, whiteSpace: s.whiteSpace,
          scroll: pre.scrollWidth, room: pre.clientWidth};
}""".replace("PANEL", lab.PANEL)


def test_correct_and_incorrect_differ_in_colour_and_wrap_between_words(notebooks):
    """Exercise 7 in notebook 07: a wrong prediction, then the right one. The checker's
    verdicts look different (red, green) and wrap between words, never inside one."""
    from agentkit.lessons.exercises import q7

    nb = notebooks.run("07_your_own_tool.ipynb")
    answer = nb.find_cell("predicted_failures = None")
    check = nb.find_cell("correct = q7.check(predicted_failures)")
    seen = {}
    for guess in ('predicted_failures = {"budget_spent"}', q7.solution_code):
        _set_source(nb, answer, guess)
        lab.run_cell(nb, answer)
        view = lab.run_cell(nb, check)
        assert not view.errors, view.errors
        verdict = nb.page.evaluate(VERDICT_JS, check)
        assert verdict is not None, lab.cell_text(nb, check)
        seen[verdict["text"].split(":", 1)[0]] = verdict
    incorrect, correct = seen["Incorrect"], seen["Correct"]
    assert incorrect["color"] == "rgb(180, 35, 24)" and correct["color"] == "rgb(26, 127, 55)"
    for verdict in (incorrect, correct):
        assert verdict["wordBreak"] == "normal" and verdict["whiteSpace"] == "pre-wrap", verdict
        assert verdict["scroll"] <= verdict["room"] + 1, verdict


def test_the_map_rows_and_the_foot_are_links_a_learner_can_click(notebooks):
    """00's map: each row's name is a link to its notebook; every notebook's foot links the
    previous and next notebooks, the map and the glossary (rendered as links, not text)."""
    nb = notebooks.run("00_start_here.ipynb")
    names = [name.removesuffix(".ipynb") for name in lab.notebook_names()]
    # JupyterLab resolves a relative link to the file's URL (/files/NAME?…) and opens it in Lab.
    paths = nb.page.evaluate(
        f"() => [...document.querySelectorAll('{lab.PANEL} .jp-MarkdownCell a')].map(a => a.pathname)")
    for name in names:
        assert f"/files/{name}.ipynb" in paths, f"00 does not link {name}.ipynb: {paths}"
    foot = nb.page.locator(f"{lab.PANEL} .jp-MarkdownCell").last
    foot.scroll_into_view_if_needed()
    links = foot.locator("a").evaluate_all("as => as.map(a => [a.innerText, a.pathname])")
    assert ["01 · A fake model and the baseline", "/files/01_fake_model_baseline.ipynb"] in links, links
    assert any(path == "/files/GLOSSARY.md" for _, path in links), links
