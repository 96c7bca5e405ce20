"""Every notebook follows one template (issue 11), and its time agrees with INSTRUCTOR.md.

The template, in order:

- a title ``# NN · …`` whose NN is the file's prefix (``00`` … ``07``, ``02b``);
- in the first cell: ``### What you'll do``, ``### What you'll learn``, ``### What you'll need``
  (holding ``**Time:** N min in class, M min on your own.``) and ``### Contents``, a list of
  links that each lead to a heading of the notebook;
- after the numbered sections: ``## Summary``, ``## Discussion``, ``## Further reading``,
  ``## Check your understanding`` and ``## Practice``, in that order, where every item of the
  quiz and of the practice (a numbered or a ``-`` list) has its answer folded in a
  ``<details>`` block;
- terms before use: "MCP" spelled out (Model Context Protocol) in the notebook that first uses
  it; ``in_progress`` never shown before notebook 04 teaches idempotency; "claim" and
  "fingerprint" defined in bold where the course first uses them.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("[0-9][0-9]*.ipynb"))
INSTRUCTOR = NOTEBOOKS / "INSTRUCTOR.md"

FIRST_CELL = ["### What you'll do", "### What you'll learn", "### What you'll need", "### Contents"]
CLOSING = ["## Summary", "## Discussion", "## Further reading", "## Check your understanding", "## Practice"]
TIME = re.compile(r"\*\*Time:\*\* (\d+) min in class\b[^,\n]*, (\d+) min on your own")


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def markdown(path: Path) -> list[str]:
    return ["".join(c["source"]) for c in cells(path) if c["cell_type"] == "markdown"]


def headings(path: Path) -> list[str]:
    return [line.strip() for text in markdown(path) for line in text.splitlines()
            if re.match(r"#{1,4} ", line) and not line.startswith("#!")]


def anchor(heading: str) -> str:
    """The id JupyterLab gives a heading: its rendered text, spaces as '-'."""
    text = re.sub(r"^#+\s*", "", heading)
    text = re.sub(r"[`*]", "", text)
    return text.strip().replace(" ", "-")


def section(text: str, title: str) -> str:
    """The markdown from heading ``title`` to the next heading of the same or a higher level."""
    level = title.split(" ")[0]
    start = text.index(title)
    rest = text[start + len(title):]
    match = re.search(rf"^#{{1,{len(level)}}} ", rest, flags=re.MULTILINE)
    return rest[: match.start()] if match else rest


def list_items(text: str) -> list[str]:
    """The items of a top-level list (``1. …`` or ``- …`` at the start of a line), each with
    its indented body."""
    parts = re.split(r"^(?=\d+\. |- )", text, flags=re.MULTILINE)
    return [p for p in parts if re.match(r"\d+\. |- ", p)]


def links(text: str) -> list[str]:
    """The targets of ``[…](#target)`` links; a target may hold balanced parentheses."""
    found = []
    for match in re.finditer(r"\]\(#", text):
        depth, i = 1, match.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        found.append(text[match.end(): i - 1])
    return found


def instructor_times() -> dict[str, tuple[int, int]]:
    """INSTRUCTOR.md's table "| `NN_name` | N | M |" under the heading "Time per notebook"."""
    text = section(INSTRUCTOR.read_text(encoding="utf-8"), "## Time per notebook")
    rows = re.findall(r"^\| `(\d\d[a-z]?)_[a-z0-9_]+` \| (\d+) \| (\d+) \|", text, flags=re.MULTILINE)
    return {number: (int(in_class), int(own)) for number, in_class, own in rows}


def test_there_are_notebooks_and_a_time_for_each():
    names = [p.name.split("_")[0] for p in PATHS]
    assert {"00", "01", "02", "03", "04", "05", "06", "07"} <= set(names)
    assert set(instructor_times()) == set(names), "INSTRUCTOR.md's 'Time per notebook' must list every notebook"


def listed_notebooks(text: str) -> list[str]:
    """The notebooks a map table names, one per row: ``| `NN_name` | … |`` or, clickable,
    ``| [`NN_name`](NN_name.ipynb) | … |``, in its order."""
    rows = re.findall(r"^\| (?:\[`(\d\d[a-z]?_[a-z0-9_]+)`\]\(([^)]*)\)|`(\d\d[a-z]?_[a-z0-9_]+)`) \|", text,
                      flags=re.MULTILINE)
    for linked, target, _ in rows:
        assert not linked or target == f"{linked}.ipynb", f"the row of {linked} links to {target}"
    return [linked or plain for linked, _, plain in rows]


def test_every_map_of_the_notebooks_lists_every_notebook_in_order():
    """00's "map of the notebooks" and the README's table name every notebook of the folder,
    in order: a new notebook (10 …) fails here until it has its row in both."""
    names = [p.stem for p in PATHS]
    start = "\n".join(markdown(NOTEBOOKS / "00_start_here.ipynb"))
    course_map = section(start, "## 3. The map of the notebooks")
    assert listed_notebooks(course_map) == names
    clickable = re.findall(r"^\| \[`", course_map, flags=re.MULTILINE)
    assert len(clickable) == len(names), "every row of 00's map opens its notebook on a click"
    readme = (NOTEBOOKS.parent / "README.md").read_text(encoding="utf-8")
    assert listed_notebooks(section(readme, "## The notebooks")) == names


SLOT = re.compile(r"^\| (\d+):(\d\d)–(\d+):(\d\d) \| (?:`(\d\d[a-z]?)_[a-z0-9_]+`|(slack)) \|", re.MULTILINE)


def ninety_minute_times() -> dict[str, int]:
    """The "90 min" column of INSTRUCTOR.md's "Time per notebook" table (the 4th column)."""
    text = section(INSTRUCTOR.read_text(encoding="utf-8"), "## Time per notebook")
    rows = re.findall(r"^\| `(\d\d[a-z]?)_[a-z0-9_]+` \| \d+ \| \d+ \| (\d+) \|", text, flags=re.MULTILINE)
    return {number: int(minutes) for number, minutes in rows}


def schedule(text: str, length: int) -> tuple[dict[str, int], int]:
    """The minutes per notebook and the slack of one schedule table; checks that its slots run
    back to back from 0:00 and that the slack slot ends the session at ``length`` minutes."""
    slots = [(int(a) * 60 + int(b), int(c) * 60 + int(d), number or slack)
             for a, b, c, d, number, slack in SLOT.findall(text)]
    assert slots, "no schedule rows"
    assert slots[0][0] == 0, "a schedule starts at 0:00"
    for (_, end, _), (start, _, _) in itertools.pairwise(slots):
        assert start == end, f"a gap or an overlap at {end // 60}:{end % 60:02d}"
    assert slots[-1][2] == "slack" and slots[-1][1] == length, f"the last slot is slack, ending at {length}"
    minutes: dict[str, int] = {}
    for start, end, name in slots[:-1]:
        assert name != "slack"
        minutes[name] = minutes.get(name, 0) + end - start
    return minutes, slots[-1][1] - slots[-1][0]


def test_the_fifty_minute_plan_adds_up_with_slack():
    text = section(INSTRUCTOR.read_text(encoding="utf-8"), "## The 50 minutes")
    minutes, slack = schedule(text, 50)
    assert slack >= 5, "a realistic 50-minute plan keeps at least 5 minutes of slack"
    in_class = {number: times[0] for number, times in instructor_times().items() if times[0]}
    assert minutes == in_class, "the schedule's minutes differ from 'Time per notebook'"
    assert sum(in_class.values()) + slack == 50
    assert "**Named cuts**" in text


def test_the_ninety_minute_plan_is_two_sessions_of_45_with_slack():
    text = section(INSTRUCTOR.read_text(encoding="utf-8"), "## The 90 minutes: two 45-minute sessions, split after 03")
    first = section(text, "### Session 1: one attempt (00–03)")
    second = section(text, "### Session 2: between attempts (04–07)")
    one, slack_one = schedule(first, 45)
    two, slack_two = schedule(second, 45)
    assert min(slack_one, slack_two) >= 5
    assert max(one) <= "03" < min(two), "the sessions split after 03"
    planned = {number: m for number, m in ninety_minute_times().items() if m}
    assert {**one, **two} == planned, "the sessions' minutes differ from the '90 min' column"
    assert sum(planned.values()) + slack_one + slack_two == 90


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_title_and_first_cell(path):
    first = cells(path)[0]
    assert first["cell_type"] == "markdown"
    text = "".join(first["source"])
    number = path.name.split("_")[0]
    title = text.splitlines()[0]
    assert re.fullmatch(rf"# {number} · \S.*", title), f"{path.name}: the title must read '# {number} · …', not {title!r}"
    positions = [text.find(h) for h in FIRST_CELL]
    assert -1 not in positions, f"{path.name}: the first cell needs {FIRST_CELL}"
    assert positions == sorted(positions), f"{path.name}: {FIRST_CELL} in this order"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_time_agrees_with_the_instructor_guide(path):
    text = "".join(cells(path)[0]["source"])
    need = section(text, "### What you'll need")
    number = path.name.split("_")[0]
    expected = instructor_times().get(number)
    match = TIME.search(need)
    assert match, (f"{path.name}: 'What you'll need' must say '**Time:** N min in class, M min on your "
                   f"own.' (INSTRUCTOR.md says {expected})")
    assert (int(match[1]), int(match[2])) == expected, f"{path.name}: time differs from INSTRUCTOR.md"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_contents_links_lead_to_headings(path):
    text = "".join(cells(path)[0]["source"])
    targets = links(section(text, "### Contents"))
    anchors = {anchor(h) for h in headings(path)}
    assert len(targets) >= 5, f"{path.name}: Contents must link its sections"
    missing = [target for target in targets if target not in anchors]
    assert not missing, f"{path.name}: Contents links to no heading: {missing}"
    for title in CLOSING:
        assert anchor(title) in targets, f"{path.name}: Contents must link {title}"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_closing_sections_in_order_with_folded_answers(path):
    found = [h for h in headings(path) if h in CLOSING]
    assert found == CLOSING, f"{path.name}: the closing sections must be {CLOSING}, found {found}"
    all_headings = headings(path)
    sections = [i for i, h in enumerate(all_headings) if h.startswith("## ") and h not in CLOSING]
    assert sections and max(sections) < all_headings.index("## Summary"), f"{path.name}: Summary after the sections"
    text = "\n".join(markdown(path))
    for title in ("## Check your understanding", "## Practice"):
        items = list_items(section(text, title))
        assert items, f"{path.name}: {title} has no questions"
        unanswered = [item.splitlines()[0] for item in items if "<details>" not in item]
        assert not unanswered, f"{path.name}: {title}: give each question its (worked) answer in a <details> block: {unanswered}"
    for title in ("## Discussion", "## Further reading"):
        assert len(section(text, title).strip()) > 100, f"{path.name}: {title} is empty"


def test_terms_are_introduced_before_use():
    for path in PATHS:
        text = "\n".join(markdown(path))
        if "MCP" in text:
            first = next(t for t in markdown(path) if "MCP" in t)
            before = text[: text.index(first) + len(first)]
            assert "Model Context Protocol" in before, f"{path.name}: spell out MCP (Model Context Protocol) where it first appears"
    early = [p for p in PATHS if p.name.split("_")[0] < "04"]
    for path in early:  # in_progress belongs to idempotency, taught in 04
        assert "in_progress" not in path.read_text(encoding="utf-8"), f"{path.name} shows in_progress before 04"
    course = "\n".join(t for p in PATHS for t in markdown(p))
    for term in ("claim", "fingerprint"):
        first = re.search(rf"\b{term}", course)
        assert first is not None
        assert course[first.start() - 2: first.start()] == "**", f"define '{term}' in bold where the course first uses it"


def outputs_of(path: Path, needle: str) -> str:
    """Every stored output (text/html and text/plain) of the first code cell holding ``needle``."""
    for cell in cells(path):
        if cell["cell_type"] == "code" and needle in "".join(cell["source"]):
            parts = []
            for output in cell.get("outputs", []):
                data = output.get("data", {})
                parts += ["".join(data.get(kind, "")) for kind in ("text/html", "text/plain")]
                parts.append("".join(output.get("text", "")))
            return "\n".join(parts)
    raise LookupError(f"{path.name}: no code cell holds {needle!r}")


def test_tables_show_what_the_prose_refers_to():
    exercises = NOTEBOOKS / "06_exercises.ipynb"
    table = outputs_of(exercises, "pd.DataFrame({\"tool\": list(TOOLS_TO_CLASSIFY)")
    assert "it can be moved back" in table and "customer's e-mail" in table  # not cut at 50 characters
    baseline = outputs_of(NOTEBOOKS / "01_fake_model_baseline.ipynb", 'baseline.to_frame()[["step"')
    assert '"Idempotency keys",…' in baseline  # data cut at a word boundary, marked with an ellipsis
    matrix_table = outputs_of(NOTEBOOKS / "05_failure_matrix.ipynb", "matrix.run_matrix(workdir=workspace)")
    assert "timeout outcome unknown" in matrix_table and "handler calls" in matrix_table  # labels that wrap


#: The course's path, as the feet of the notebooks lead along it: 02b is optional and uses 04's
#: idempotency keys and approvals, so it sits beside the path, after 04 (00's map says so).
COURSE = ["00", "01", "02", "03", "04", "05", "06", "07", "08", "09", "10"]
BESIDE = {"02b": ("04", "05")}


def foot_links(path: Path) -> dict[str, str]:
    """The last cell's ``**Previous:** [...](target)`` and ``**Next:** [...](target)``."""
    last = cells(path)[-1]
    assert last["cell_type"] == "markdown", f"{path.name}: the last cell is the foot, a markdown cell"
    text = "".join(last["source"])
    return {kind: target for kind, target in re.findall(r"\*\*(Previous|Next):\*\* \[[^\]]+\]\(([^)#]+)\)", text)}


def test_every_notebook_ends_with_previous_and_next_links_along_the_course():
    by_number = {p.name.split("_")[0]: p for p in PATHS}
    assert sorted(COURSE + list(BESIDE)) == sorted(by_number), "every notebook is on the course or beside it"
    for number, path in by_number.items():
        if number in BESIDE:
            before, after = BESIDE[number]
        else:
            i = COURSE.index(number)
            before = COURSE[i - 1] if i else None
            after = COURSE[i + 1] if i + 1 < len(COURSE) else None
        expected = {kind: by_number[n].name for kind, n in (("Previous", before), ("Next", after)) if n}
        assert foot_links(path) == expected, f"{path.name}: the foot links {foot_links(path)}, not {expected}"
        last = "".join(cells(path)[-1]["source"])
        assert "(GLOSSARY.md)" in last and "(00_start_here.ipynb#3.-The-map-of-the-notebooks)" in last
    assert "(02b_mcp.ipynb)" in "".join(cells(by_number["04"])[-1]["source"]), "04's foot offers 02b"


#: Terms of the glossary, each with the case-sensitive pattern of its use in the notebooks'
#: prose (``Budget`` the class is not ``budget`` the term) and its anchor in GLOSSARY.md.
GLOSSARY_TERMS = {
    "idempotency key": (r"\bidempotency keys?\b", "idempotency-key"),
    "status lookup": (r"\bstatus lookups?\b", "status-lookup"),
    "outcome unknown": (r"\boutcome[ _]unknown\b", "outcome-unknown"),
    "claim": (r"\bclaim", "claim"),
    "lease": (r"\blease", "lease"),
    "approval": (r"\bapprovals?\b", "approval"),
    "budget": (r"\bbudget\b", "budget"),
    "side-effect level": (r"\bside-effect levels?\b", "side-effect-level"),
}


def test_the_glossary_explains_each_term_and_its_first_use_in_00_to_04_links_there():
    glossary = (NOTEBOOKS / "GLOSSARY.md").read_text(encoding="utf-8")
    early = "\n".join(t for p in PATHS if p.name.split("_")[0] <= "04" for t in markdown(p))
    for term, (pattern, anchor) in GLOSSARY_TERMS.items():
        assert f'<a id="{anchor}"></a>' in glossary, f"GLOSSARY.md has no entry {anchor!r} for {term!r}"
        first = re.search(pattern, early)
        if first is None:
            continue  # not used before 05: nothing to link
        opening = early.rfind("[", 0, first.start())
        closing = early.find("](", first.end())
        linked = (opening != -1 and closing != -1 and "]" not in early[opening:first.start()]
                  and "]" not in early[first.end():closing]
                  and early.startswith(f"](GLOSSARY.md#{anchor})", closing))
        where = early[max(0, first.start() - 60): first.end() + 40].replace("\n", " ")
        assert linked, f"the first use of {term!r} in 00-04 links to GLOSSARY.md#{anchor}: …{where}…"
