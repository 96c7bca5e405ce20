"""Notebook 08 in JupyterLab: Run All Cells shows no error, and the one table of real handler
calls (each framework alone beside ``+ agentkit``) renders whole, without horizontal scrolling."""

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
