"""Every reference into a notebook resolves against the notebook as it is: "04 §6.2",
"`03_invocation_boundary` §2.1", "§3–§5", "section 5.3", "00 Q3", "Practice 2", "exercise 3".

Read from the notebooks' Markdown, notebooks/INSTRUCTOR.md, docs/design.md, README.md and the
two pages of ``make handout``. A reference names its notebook right before it ("04 §6.2",
"notebook 04 §6.2", "`04` §6.1", "`04_side_effects_and_idempotency` §3"); without one it is
the notebook it is written in, or, in the other documents, the notebook the same table row
or paragraph named last, else the one named last under the same heading. Each must resolve:

- ``§x`` / ``§x.y`` / ``section x.y`` / a range ``§a–b``: a heading ``## x. …`` or
  ``### x.y …`` of that notebook, both ends of a range;
- ``Qn`` and ``Practice n``: the n-th question of its "Check your understanding" or
  "Practice";
- ``exercise n``: a notebook whose code runs ``qn.check(``;
- and the reference must be the section of its topic: a reference annotated with (or, without
  an annotation, written in a paragraph about) a topic the notebook gives a heading of its own
  (the key designs, ``run_once``, the atomic write, the glance table, the task budget) points
  at that heading.

The failure matrix is referred to by cell names (*timeout, outcome unknown × reversible
write*), never by a row number: no table of it shows one, so "row 10" could not be checked.
"""

from __future__ import annotations

import html
import importlib.util
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("[0-9][0-9]*.ipynb"))
DOCUMENTS = [ROOT / "README.md", ROOT / "docs" / "design.md", NOTEBOOKS / "INSTRUCTOR.md"]

#: A topic (a pattern in the reference's annotation) → the heading that owns it (a pattern).
TOPICS = [
    (r"key designs?\b|content-addressed|id-addressed", r"key design"),
    (r"\brun_once\b", r"run_once"),
    (r"\batomic\b", r"atomic"),
    (r"\bglance\b", r"glance"),
    (r"\bbudget\b", r"budget"),
]

NUMBER = r"\d+(?:\.\d+)?"
MENTION = re.compile(
    r"`(?P<file>\d\d[a-z]?)_[a-z0-9_]+`"
    r"|\bnotebooks? `?(?P<word>\d\d[a-z]?)\b"
    r"|`(?P<tick>\d\d[a-z]?)`"
    rf"|\b(?P<bare>\d\d[a-z]?)(?=(?:'s)? (?:§|Q\d|exercise \d|Practice \d|section {NUMBER}))"
)
REFERENCE = re.compile(
    rf"§(?P<a>{NUMBER})(?:–§?(?P<b>{NUMBER}))?"
    rf"|\bsections? (?P<s>{NUMBER})(?: and (?P<s2>{NUMBER}))?"
    r"|\bQ(?P<q>\d+)\b"
    r"|\bPractice (?P<p>\d+)\b"
    r"|\b[Ee]xercise (?P<e>\d+)\b"
)
ROW = re.compile(r"\brows? \d+\b")


@dataclass
class Notebook:
    number: str
    sections: dict[str, str] = field(default_factory=dict)  # "6.2" → the heading's text
    quiz: int = 0
    practice: int = 0
    code: str = ""


def markdown_of(path: Path) -> list[str]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]


def items(text: str, heading: str) -> int:
    """How many top-level items the list under ``heading`` has."""
    start = text.find("\n" + heading + "\n")
    if start < 0:
        return 0
    rest = text[start + len(heading) + 2:]
    end = re.search(r"^## ", rest, flags=re.MULTILINE)
    return len(re.findall(r"^\d+\. ", rest[: end.start()] if end else rest, flags=re.MULTILINE))


def load_notebook(path: Path) -> Notebook:
    number = path.name.split("_")[0]
    text = "\n\n".join(markdown_of(path))
    found = Notebook(number)
    for match in re.finditer(rf"^#{{2,3}} (?P<n>{NUMBER})\.? (?P<title>.+)$", text, flags=re.MULTILINE):
        found.sections[match["n"]] = match["title"]
    found.quiz = items("\n" + text, "## Check your understanding")
    found.practice = items("\n" + text, "## Practice")
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    found.code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return found


NOTEBOOK = {nb.number: nb for nb in map(load_notebook, PATHS)}


def blocks(markdown: str) -> list[tuple[str, str]]:
    """(the heading above it, the block): paragraphs and list items joined into one line each,
    every table row on its own; fenced code left out."""
    out: list[tuple[str, str]] = []
    heading, lines, fenced = "", [], False

    def flush() -> None:
        if lines:
            out.append((heading, " ".join(line.strip() for line in lines)))
            lines.clear()

    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            flush()
            fenced = not fenced
            continue
        if fenced:
            continue
        if re.match(r"#{1,6} ", line):
            flush()
            heading = line
            out.append((heading, line))
        elif not line.strip():
            flush()
        elif line.startswith("|"):
            flush()
            out.append((heading, line))
        else:
            if re.match(r"\s{0,3}(?:[-*]|\d+\.) ", line):  # a list item starts its own block
                flush()
            lines.append(line)
    flush()
    return out


def annotation(block: str, start: int, end: int) -> str:
    """What the text says about the reference at ``block[start:end]``, for its topic:

    - its ``'s …`` phrase (``§6.1's two key designs``), or the parenthesis right after it
      (``§6.1 (the fingerprint)``);
    - inside a citation, a parenthesis of references only (``(04 §6.1, 07 §5)``): the whole
      paragraph or row, whose claim the citation backs;
    - inside a parenthesis of its own (``the glance table (§2)``): the phrase before it;
    - else nothing (no topic to check)."""
    rest = block[end:]
    if rest.startswith("'s "):
        return re.split(r"[;,.()|]", rest[3:], maxsplit=1)[0]
    if rest.startswith(" ("):
        depth = 0
        for i, char in enumerate(rest[1:], start=1):
            depth += {"(": 1, ")": -1}.get(char, 0)
            if depth == 0:
                return rest[2:i]
    opened = block.rfind("(", 0, start)
    if opened < 0 or ")" in block[opened:start]:
        return ""
    closed = block.find(")", end)
    inside = block[opened + 1: closed if closed >= 0 else len(block)]
    if block[opened + 1: start].strip(" `") == "":
        return re.split(r"[;,:|(]", block[:opened])[-1]
    leftover = REFERENCE.sub("", MENTION.sub("", inside))
    if MENTION.search(inside) and re.fullmatch(r"[\s,;`]*(?:notebooks?[\s,;`]*)*", leftover):
        return block  # a citation: it backs the paragraph's claim
    return ""


def mentioned(match: re.Match[str]) -> str:
    return next(v for k, v in match.groupdict().items() if v is not None)


def check_section(number: str, wanted: list[str], note: str) -> list[str]:
    notebook = NOTEBOOK.get(number)
    if notebook is None:
        return [f"notebook {number} does not exist"]
    problems = [f"{number} has no section §{n}" for n in wanted if n not in notebook.sections]
    if problems:
        return problems
    for topic, owner in TOPICS:
        if not re.search(topic, note, flags=re.IGNORECASE):
            continue
        homes = [n for n, title in notebook.sections.items() if re.search(owner, title, flags=re.IGNORECASE)]
        covered = _span(wanted)
        if homes and not any(home in covered or home.split(".")[0] in covered for home in homes):
            shown = ", ".join(f"§{n} ({notebook.sections[n]})" for n in homes)
            problems.append(f"§{'–'.join(wanted)} of {number} is about {topic!r}, which is {shown}")
    return problems


def _span(wanted: list[str]) -> set[str]:
    """The section numbers a reference or a range covers (§3–5 covers 3, 4, 5 and their subsections)."""
    if len(wanted) == 1:
        return {wanted[0]}
    low, high = (float(n) for n in wanted)
    return {n for nb in NOTEBOOK.values() for n in nb.sections if low <= float(n.split(".")[0]) <= high
            or low <= float(n) <= high}


def resolve(where: str, text: str, own: str | None) -> list[str]:
    """Every problem with the references of one document (``own``: the notebook it is, if any)."""
    problems: list[str] = []
    section_context: str | None = None
    current_heading = None
    for heading, block in blocks(text):
        if heading != current_heading:
            current_heading, section_context = heading, None
        if own is None:
            for row in ROW.findall(block):
                problems.append(f"{where}: {row!r}: name the matrix cell (failure × effect) instead: "
                                f"no table shows a row number ({block[:80]!r})")
        mentions = [(m.start(), m.end(), mentioned(m)) for m in MENTION.finditer(block)]
        for ref in REFERENCE.finditer(block):
            before = [m for m in mentions if m[1] <= ref.start()]
            right_before = before and block[before[-1][1]: ref.start()].strip(" `") in ("", "'s")
            if own is not None:  # in a notebook: its own, unless named right before
                number = before[-1][2] if right_before else own
            else:
                number = before[-1][2] if before else section_context
            if number is None:
                problems.append(f"{where}: {ref[0]!r} names no notebook ({block[:100]!r})")
                continue
            notebook = NOTEBOOK.get(number)
            if notebook is None:
                problems.append(f"{where}: {ref[0]!r}: notebook {number} does not exist")
                continue
            if ref["a"] or ref["s"]:
                wanted = [n for n in (ref["a"], ref["b"]) if n] if ref["a"] else [ref["s"]]
                found = check_section(number, wanted, annotation(block, ref.start(), ref.end()))
                if ref["s2"]:
                    found += check_section(number, [ref["s2"]], annotation(block, ref.start(), ref.end()))
                problems += [f"{where}: {ref[0]!r}: {p} ({block[:120]!r})" for p in found]
            elif ref["q"] and int(ref["q"]) > notebook.quiz:
                problems.append(f"{where}: {number} Q{ref['q']}: its quiz has {notebook.quiz} questions")
            elif ref["p"] and int(ref["p"]) > notebook.practice:
                problems.append(f"{where}: {number} Practice {ref['p']}: it has {notebook.practice} items")
            elif ref["e"] and not any(f"q{ref['e']}.check(" in nb.code for nb in NOTEBOOK.values()):
                problems.append(f"{where}: exercise {ref['e']}: no notebook checks q{ref['e']}")
        if mentions and own is None:
            section_context = mentions[-1][2]
    return problems


def handout_pages(tmp_path: Path) -> list[tuple[str, str]]:
    """The two pages of `make handout` as Markdown-like text: a notebook's quiz under a
    heading that names it, so its bare references resolve against it."""
    spec = importlib.util.spec_from_file_location("handout_tool", ROOT / "tools" / "handout.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    pages = []
    for path in tool.build(tmp_path):
        page = path.read_text(encoding="utf-8")
        page = re.sub(r"<h3[^>]*>(\d\d[a-z]?_[a-z0-9_]+)</h3>", r"\n\n### `\1`\n\n", page)
        page = re.sub(r"<(p|li|tr|h\d|div|pre|details|summary)[^>]*>", "\n\n", page)
        pages.append((path.name, html.unescape(re.sub(r"<[^>]+>", " ", page))))
    return pages


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_a_notebooks_references_resolve(path: Path) -> None:
    problems = resolve(path.name, "\n\n".join(markdown_of(path)), path.name.split("_")[0])
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.name)
def test_a_documents_references_resolve(path: Path) -> None:
    problems = resolve(path.name, path.read_text(encoding="utf-8"), None)
    assert not problems, "\n".join(problems)


def test_the_handouts_references_resolve(tmp_path: Path) -> None:
    problems = []
    for name, text in handout_pages(tmp_path):
        problems += resolve(name, text, None)
    assert not problems, "\n".join(problems)


def test_the_checker_catches_what_it_is_for() -> None:
    """The mistakes this test exists for, each caught; their corrections pass."""
    cases = {
        "The key designs (04 §6.1).": "is about",
        "`04_side_effects_and_idempotency` §6.1 (the fingerprint, the two key designs)": "is about",
        "| `04_side_effects_and_idempotency` | §1–§10 in full: §6.1's two key designs |": "is about",
        "| `05_failure_matrix` | the whole table (§1), the glance table (§5) |": "is about",
        "Two designs, content-addressed and id-addressed (notebooks 04 §6.1, 07 §5).": "is about",
        "*Timeout × reversible write* (row 10)": "name the matrix cell",
        "see 04 §12": "has no section §12",
        "00 Q9 asks": "its quiz has",
        "a bare §3 with no notebook": "names no notebook",
    }
    for text, caught in cases.items():
        found = resolve("case", text, None)
        assert any(caught in problem for problem in found), (text, found)
    for text in ("The key designs (04 §6.2).", "`04_side_effects_and_idempotency` §6.1 (the "
                 "fingerprint), §6.2 (the two key designs)", "`04` §3–5 and 00 Q3",
                 "Notebook `08_your_framework` runs offline.\n\n| 0:00 | §5.3 with it |"):
        assert resolve("case", text, None) == [], text
