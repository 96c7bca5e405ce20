"""Notebook 08 in JupyterLab: Run All Cells shows no error, the one table of real handler
calls (each framework alone beside ``+ agentkit``) renders whole, without horizontal scrolling,
and each approval section (5.1, 5.2, 5.3) runs again on its own, in any order, as a learner
re-runs cells: no section reads another's variables, and every payment still runs once."""

from __future__ import annotations

import labdriver as lab
import pytest

pytestmark = pytest.mark.browser

NAME = "08_your_framework.ipynb"
TABLE_CELL = "counts = await table()"


def test_the_framework_table_renders(notebooks):
    from playwright.sync_api import expect

    nb = notebooks.run(NAME)
    assert not lab.problems(nb), lab.problems(nb)
    index = nb.find_cell(TABLE_CELL)
    output = nb.page.locator(f"{lab.PANEL} .jp-Notebook .jp-Cell").nth(index).locator(".jp-OutputArea")
    table = output.locator("table").first
    table.scroll_into_view_if_needed()
    expect(table).to_be_visible(timeout=lab.WIDGET_TIMEOUT * 1000)
    header = table.locator("thead").text_content() or ""
    for framework in ("openai-agents", "pydantic-ai", "langgraph"):
        assert framework in header, header
    assert "alone" in header and "+ agentkit" in header
    rows = table.locator("tbody tr")
    assert rows.count() == 6
    langgraph_approved = (rows.filter(has_text="approval approved").text_content() or "").split()
    assert langgraph_approved[-2:] == ["3", "2"], langgraph_approved  # LangGraph: 3 alone, 2 with
    scroll, room = table.evaluate(
        "t => { const o = t.closest('.jp-OutputArea-output'); return [o.scrollWidth, o.clientWidth]; }"
    )
    assert scroll <= room + 1, f"the framework table needs {scroll} px in {room} px: it scrolls"
    lab.shot(output, "framework-table.png")


#: Each approval section: (the first line of each of its code cells, in order; what its last
#: cell prints once the payment ran). Sections re-run from their first cell.
SECTIONS = {
    "5.1 openai-agents": (["oa_bench = Bench(CASES[4])", "approve_it = True      # you decide: True"],
                          "handler calls: 1"),
    "5.2 Pydantic AI": (["from pydantic_ai import Agent as PydanticAgent", "approve_it = True      # you decide\n"],
                        "handler calls: 1"),
    "5.3 LangGraph": (["from langchain_core.language_models.fake_chat_models"], "handler calls: 2"),
}


def test_the_approval_sections_re_run_out_of_order(notebooks):
    """After Run All: 5.3, then 5.1, then 5.1's resuming cell once more, then 5.2 twice, then
    5.1 again: every cell runs without an error, and each section's payment ran exactly once
    (a re-run resume replays the settled approval)."""
    nb = notebooks.run(NAME)
    assert not lab.problems(nb), lab.problems(nb)
    cells = {name: [nb.find_cell(first) for first in firsts] for name, (firsts, _) in SECTIONS.items()}
    order = [("5.3 LangGraph", None), ("5.1 openai-agents", None), ("5.1 openai-agents", -1),
             ("5.2 Pydantic AI", None), ("5.2 Pydantic AI", -1), ("5.1 openai-agents", None)]
    for name, only in order:
        indices = cells[name] if only is None else cells[name][only:]
        for index in indices:
            view = lab.run_cell(nb, index)
            assert not view.errors, f"{name}: cell {index} failed when run again: {view.errors}"
        shown = lab.cell_text(nb, indices[-1])
        assert SECTIONS[name][1] in shown, f"{name}: {shown!r}"
        assert "handler calls: 2" not in shown or name.startswith("5.3"), shown  # never paid twice
    langgraph = lab.cell_text(nb, cells["5.3 LangGraph"][-1])
    assert "in the model's order: [{'to': 'ada', 'cents': 500}, {'to': 'bob', 'cents': 700}]" in langgraph
