"""`make handout` as a person prints it: Chromium's print to PDF of both pages.

The handout is one A4 sheet printed on both sides: exactly two pages, the reference on the
front and the prediction grid with the exit question on the back, each row tall enough to
write ``outcome_unknown+retryable`` by hand. The answer key's first page is not a grid and
three quarters of white: the exit question and its answer follow the grid on page 1.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]


def pages(pdf: bytes) -> int:
    return len(re.findall(rb"/Type\s*/Page(?![s\w])", pdf))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("handout")
    child = subprocess.run([sys.executable, str(ROOT / "tools" / "handout.py"), "--out", str(out)],
                           capture_output=True, text=True, timeout=120, check=False)
    assert child.returncode == 0, child.stderr
    return out


def test_the_handout_prints_on_one_sheet_both_sides(browser: Any, built: Path) -> None:
    page = browser.new_page()
    try:
        page.goto((built / "handout.html").as_uri())
        assert pages(page.pdf(format="A4", prefer_css_page_size=True)) == 2
        page.emulate_media(media="print")
        back = page.locator(".back")
        rows = page.locator("table.blanks td.blank")
        # CSS pixels at 96 dpi: 1 mm = 3.78 px; a blank cell holds two written lines
        heights = rows.evaluate_all("cells => cells.map(c => c.getBoundingClientRect().height)")
        assert min(heights) >= 16 * 3.78 * 0.98, heights[:3]
        widths = rows.evaluate_all("cells => cells.map(c => c.getBoundingClientRect().width)")
        assert min(widths) >= 45 * 3.78, widths[:3]  # "outcome_unknown+retryable" in hand
        assert "Exit question" in back.inner_text()
        assert back.evaluate("e => e.getBoundingClientRect().height") < 277 * 3.78  # fits a page
    finally:
        page.close()


def test_the_answer_keys_first_page_is_not_mostly_blank(browser: Any, built: Path) -> None:
    page = browser.new_page()
    try:
        page.goto((built / "answer_key.html").as_uri())
        page.emulate_media(media="print")
        top = page.locator("h2", has_text="The exit question").evaluate(
            "e => e.getBoundingClientRect().top")
        assert top < 277 * 3.78, "the exit question must follow the grid on page 1"
        overflow = page.locator("pre").evaluate_all(
            "pres => pres.filter(p => p.scrollWidth > p.clientWidth + 1).length")
        assert overflow == 0, "a code line runs past the margin"
    finally:
        page.close()


def test_the_pipeline_picture_keeps_its_lines_on_a4(browser: Any, built: Path) -> None:
    """The picture wrapped on A4: "Handler" and "Raw result" on lines of their own, the arrows
    out of line. Printed, each line of the picture is one line, inside its column."""
    page = browser.new_page()
    try:
        page.goto((built / "handout.html").as_uri())
        page.emulate_media(media="print")
        page.set_viewport_size({"width": round(192 * 3.78), "height": round(277 * 3.78)})  # A4 less margins
        picture = page.locator("pre.picture")
        text = picture.inner_text()
        assert "Handler" in text and "Raw result" in text
        lines = len(text.rstrip("\n").splitlines())
        height, line, scroll, room = picture.evaluate(
            "p => [p.getBoundingClientRect().height, parseFloat(getComputedStyle(p).lineHeight),"
            " p.scrollWidth, p.clientWidth]")
        assert round(height / line) == lines, f"{lines} lines drawn on {height / line:.1f}: the picture wraps"
        assert scroll <= room + 1, f"the picture needs {scroll} px in {room} px"
        column = picture.evaluate("p => p.parentElement.getBoundingClientRect().width")
        assert room <= column + 1
    finally:
        page.close()
