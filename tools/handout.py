"""Build the class handout and the instructor's answer key as printable HTML (``make handout``).

    .venv/bin/python tools/handout.py [--out build]

writes ``build/handout.html`` (one A4 page: the pipeline, the side-effect levels, the error
codes with ``retryable``, the two key designs, an empty prediction grid for the failure
matrix) and ``build/answer_key.html`` (the filled grid, every notebook's "Check your
understanding" with its answers, every exercise's solution, and the guide's live demo "audit
save_brief" played for real). Print them from the browser (Ctrl+P; the handout fits one page).

Nothing is copied by hand, so nothing can drift: the codes and their ``retryable`` come from
``agentkit.boundary.errors`` (ErrorCode, RETRYABLE), the levels from ``Effect``, the grid from
``agentkit.demo.scenarios`` (FAILURES, CELLS) and ``data/failure_matrix.csv``, and the prose of
each table from ``docs/design.md``. The build fails (exit 1, one line naming the mismatch)
when docs/design.md's tables and the code disagree.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
NOTEBOOKS = ROOT / "notebooks"


class Drift(ValueError):
    """docs/design.md and the code disagree: the handout would teach something untrue."""


# ----------------------------------------------------------------------------- reading design.md


def section(markdown: str, heading: str) -> str:
    """The text under ``heading`` (a line ``## …``) up to the next heading of that level or above."""
    level = heading.split(" ", 1)[0]
    start = markdown.find("\n" + heading + "\n")
    if start < 0:
        raise Drift(f"docs/design.md has no section {heading!r}")
    rest = markdown[start + len(heading) + 2:]
    match = re.search(rf"^#{{1,{len(level)}}} ", rest, flags=re.MULTILINE)
    return rest[: match.start()] if match else rest


def table_rows(text: str) -> list[list[str]]:
    """The body rows of the first Markdown table in ``text``, cells stripped."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if all(re.fullmatch(r":?-+:?", cell) for cell in cells):
            continue
        rows.append(cells)
    return rows[1:]  # without the header


def code(cell: str) -> str:
    return cell.strip().strip("`")


def inline(text: str) -> str:
    """Markdown's inline code and bold as HTML, everything else escaped."""
    escaped = html.escape(text)
    escaped = re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", escaped)


def error_codes(design: str) -> list[tuple[str, str, str]]:
    """(code, retryable, when) per code, checked against ErrorCode and RETRYABLE."""
    from agentkit.boundary.errors import RETRYABLE, ErrorCode

    rows = [(code(r[0]), r[1], r[2]) for r in table_rows(section(design, "## Error codes"))]
    documented = [row[0] for row in rows]
    known = [c.value for c in ErrorCode]
    if sorted(documented) != sorted(known):
        raise Drift(f"docs/design.md#error-codes lists {documented}; ErrorCode has {known}")
    for name, retryable, _ in rows:
        flag = RETRYABLE[ErrorCode(name)]
        said = retryable.lower()
        if said in ("yes", "no") and (said == "yes") != flag:
            raise Drift(f"docs/design.md#error-codes says {name} retryable {retryable}; RETRYABLE says {flag}")
    return rows


def effects(design: str) -> list[tuple[str, str, str]]:
    """(effect, example, automatic retry) per level, checked against Effect."""
    from agentkit.boundary.spec import Effect

    rows = [(code(r[0]), r[1], r[2]) for r in table_rows(section(design, "## Side-effect levels"))]
    if [row[0] for row in rows] != [e.value for e in Effect]:
        raise Drift(f"docs/design.md#side-effect-levels lists {[r[0] for r in rows]}; "
                    f"Effect has {[e.value for e in Effect]}")
    return rows


def pipeline(design: str) -> tuple[str, list[tuple[str, str]]]:
    """The pipeline picture and (stage, refuses with) per stage."""
    text = section(design, "## Pipeline")
    picture = re.search(r"```\n(.*?)```", text, flags=re.DOTALL)
    if picture is None:
        raise Drift("docs/design.md#pipeline has no picture")
    return picture[1], [(r[0], r[2]) for r in table_rows(text)]


def key_designs(design: str) -> list[list[str]]:
    rows = table_rows(section(design, "## Key designs"))
    if not rows:
        raise Drift("docs/design.md#key-designs has no table")
    return rows


# ----------------------------------------------------------------------------- the grid


def grid(answers: dict[tuple[str, str], str] | None = None) -> str:
    """The failure matrix as a table: "—" where a failure cannot happen at that level; blank
    cells to fill in (``answers`` None), or the CSV's expectations (the answer key)."""
    from agentkit.demo.scenarios import CELLS, EFFECTS, FAILURES

    head = "".join(f"<th>{html.escape(e.replace('_', ' '))}</th>" for e in EFFECTS)
    body = []
    for failure in FAILURES:
        cells = []
        for effect in EFFECTS:
            if (failure, effect) not in CELLS:
                cells.append('<td class="dash">—</td>')
            elif answers is None:
                cells.append('<td class="blank">code:<span class="gap"></span>calls:</td>')
            else:
                cells.append(f"<td>{html.escape(answers[(failure, effect)])}</td>")
        body.append(f"<tr><th>{html.escape(failure.replace('_', ' '))}</th>{''.join(cells)}</tr>")
    return (f'<table class="grid"><tr><th>failure</th>{head}</tr>{"".join(body)}</table>')


def matrix_answers() -> dict[tuple[str, str], str]:
    from agentkit.demo.matrix import load_matrix

    return {(r["failure"], r["effect"]): f"{r['expected']} · {r['handler_calls']} call(s)"
            for r in load_matrix()}


# ----------------------------------------------------------------------------- pages

STYLE = """
@page { size: A4; margin: 8mm; }
body { font: 7.6pt/1.22 system-ui, sans-serif; color: #111; max-width: 194mm; margin: 0 auto; }
h1 { font-size: 12pt; margin: 0 0 0.5mm; } h2 { font-size: 9pt; margin: 1.5mm 0 0.6mm; }
table { border-collapse: collapse; width: 100%; margin-bottom: 0.5mm; }
th, td { border: 1px solid #999; padding: 0.3mm 1mm; text-align: left; vertical-align: top; }
th { background: #eee; } code { font-size: 7.2pt; }
pre { font-size: 6.8pt; margin: 0 0 1mm; line-height: 1.1; }
.two { display: grid; grid-template-columns: 1fr 1fr; gap: 3mm; }
.grid td.blank .gap { display: inline-block; width: 60%; }
.grid td.blank { height: 4.6mm; width: 26%; color: #777; font-size: 6.5pt; }
.grid td.dash { color: #999; text-align: center; background: #f6f6f6; }
.small { font-size: 8pt; color: #333; }
.answers details { margin: 1mm 0 3mm 4mm; } .answers summary { font-weight: bold; }
.page { page-break-after: always; }
"""


def page(title: str, body: str) -> str:
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>\n"
            f"<body>\n{body}\n</body></html>\n")


def handout(design: str) -> str:
    picture, stages = pipeline(design)
    levels = effects(design)
    codes = error_codes(design)
    designs = key_designs(design)
    parts = [
        ("<h1>One execution boundary around every tool "
        '<span class="small">· agentkit notebooks 00–07 · <i>a timeout does not prove that a '
        "write failed</i></span></h1>"),
        '<div class="two"><div>',
        "<h2>1. The pipeline: every attempt, in this order</h2>",
        f"<pre>{html.escape(picture)}</pre>",
        "<table><tr><th>stage</th><th>refuses with</th></tr>"
        + "".join(f"<tr><td>{inline(s)}</td><td>{inline(r)}</td></tr>" for s, r in stages)
        + "</table>",
        "</div><div>",
        "<h2>2. Side-effect levels: what a repeat may do</h2>",
        "<table><tr><th>effect</th><th>example</th><th>automatic retry</th></tr>"
        + "".join(f"<tr><td><code>{html.escape(e)}</code></td><td>{inline(x)}</td>"
                  f"<td>{inline(r)}</td></tr>" for e, x, r in levels)
        + "</table>",
        "</div></div>",
        "<h2>3. Stable error codes: what the model sees</h2>",
        "<table><tr><th>code</th><th>retryable</th><th>when</th></tr>"
        + "".join(f"<tr><td><code>{html.escape(c)}</code></td><td>{inline(r)}</td>"
                  f"<td>{inline(w)}</td></tr>" for c, r, w in codes)
        + "</table>",
        "<h2>4. Two key designs</h2>",
        "<table>" + "".join(
            "<tr>" + "".join(f"<td>{inline(cell)}</td>" for cell in row) + "</tr>" for row in
            [["", "content-addressed", "id-addressed"], *designs]) + "</table>",
        "<h2>5. Predict the failure matrix: the code the model sees, and the handler's real calls</h2>",
        grid(),
        ('<p class="small">Pre-flight: <code>python -m agentkit matrix</code> plays every cell '
        "and exits 0 when all match.</p>"),
    ]
    return page("agentkit handout", "\n".join(parts))


# ----------------------------------------------------------------------------- the answer key


def notebook_quizzes(paths: Iterable[Path]) -> list[tuple[str, str]]:
    """(notebook, the Markdown of its "Check your understanding" and "Practice" sections)."""
    found = []
    for path in paths:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        text = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
        parts = []
        for heading in ("## Check your understanding", "## Practice"):
            start = text.find(heading)
            if start >= 0:
                end = text.find("\n## ", start + len(heading))
                parts.append(text[start: end if end >= 0 else len(text)].strip())
        if parts:
            found.append((path.stem, "\n\n".join(parts).replace("## ", "### ")))
    return found


def markdown_html(text: str) -> str:
    try:
        import mistune
    except ImportError:  # the notebook extras bring mistune (through jupyterlab); else as text
        return f"<pre>{html.escape(text)}</pre>"
    return str(mistune.html(text))


def save_brief_audit() -> str:
    """The guide's live demo "audit save_brief", played for real: what the room will see."""
    import tempfile

    from agentkit.demo import make_demo_registry
    from agentkit.demo.harness import DESIGNS, audit_records, key_design

    with tempfile.TemporaryDirectory(prefix="agentkit-handout-") as tmp:
        registry = make_demo_registry(Path(tmp) / "demo")
        brief = registry.get("save_brief")
        assert brief is not None
        args = {"path": "briefs/a.md", "content": "# A\n"}
        other = {**args, "content": "# B\n"}
        design = key_design(brief, args, other)
        guarded = audit_records(brief, args, other, policies=registry.policies,
                                forbidden_arguments={**args, "path": "../escape.md"})
        bare = audit_records(brief, args, other)
    rows = "".join(
        f"<tr><td>{html.escape(r['failure'])}</td><td>{html.escape(r['expected'])} · "
        f"{r['expected_calls']}</td><td>{html.escape(str(r['observed']))} · {r['handler_calls']}"
        f"</td><td>{'yes' if r['pass'] else 'NO'}</td></tr>" for r in guarded)
    failing = [r for r in bare if not r["pass"]]
    return (
        f"<p>Detected key design: <b>{html.escape(DESIGNS[design])}</b>.</p>"
        "<p>Audited behind its own registry's policies (<code>policies=registry.policies, "
        "forbidden_arguments={..., \"path\": \"../escape.md\"}</code>): "
        f"<b>{sum(r['pass'] for r in guarded)} of {len(guarded)} rows pass</b>.</p>"
        "<table><tr><th>failure</th><th>expected · calls</th><th>observed · calls</th>"
        f"<th>pass</th></tr>{rows}</table>"
        "<p>Audited as a bare spec (the guide's first snippet, without <code>policies=</code>): "
        + (", ".join(f"<code>{html.escape(r['failure'])}</code> fails: {html.escape(r['why'])}"
                     for r in failing) or "every row passes")
        + ". The answer to give the room: <code>save_brief</code> is content-addressed like the "
        "chapter's key, so another content is another intent and runs (2 handler calls, as its "
        "rule expects); it asks for no scope because a registry policy guards it (the "
        "workspace), which the audit plays once it is given that policy.</p>"
    )


def exercise_solutions() -> list[tuple[int, str, str, str]]:
    from agentkit.lessons import exercises

    found = [getattr(exercises, f"q{n}") for n in range(1, 10) if hasattr(exercises, f"q{n}")]
    return [(e.number, e.title, e.hint_text, e.solution_code) for e in found]


def answer_key(design: str, notebooks: Sequence[Path]) -> str:
    parts = [
        "<h1>Answer key (instructor's copy)</h1>",
        "<h2>The failure matrix, filled in (data/failure_matrix.csv)</h2>",
        grid(matrix_answers()),
        '<div class="page"></div>',
        "<h2>The guide's live demo: audit save_brief</h2>",
        save_brief_audit(),
        "<h2>Exercises (notebooks 06 and 07): hint and solution</h2>",
    ]
    for number, title, hint, solution in exercise_solutions():
        parts.append(f"<h3>Exercise {number}: {html.escape(title)}</h3>"
                     f"<p class=\"small\">Hint: {html.escape(hint)}</p>"
                     f"<pre>{html.escape(solution)}</pre>")
    parts.append("<h2>Quizzes: every notebook's questions and answers</h2>")
    for name, markdown in notebook_quizzes(notebooks):
        parts.append(f'<section class="answers"><h3>{html.escape(name)}</h3>'
                     f"{markdown_html(markdown).replace('<details>', '<details open>')}</section>")
    return page("agentkit answer key", "\n".join(parts))


def build(out: Path) -> list[Path]:
    """Write both pages into ``out``; returns their paths. Raises Drift on a mismatch."""
    design = DESIGN.read_text(encoding="utf-8")
    out.mkdir(parents=True, exist_ok=True)
    notebooks = sorted(NOTEBOOKS.glob("[0-9][0-9]*.ipynb"))
    written = []
    for name, text in (("handout.html", handout(design)),
                       ("answer_key.html", answer_key(design, notebooks))):
        target = out / name
        target.write_text(text, encoding="utf-8")
        written.append(target)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build",
                        help="the folder to write handout.html and answer_key.html into (default: build)")
    options = parser.parse_args(argv)
    try:
        written = build(options.out)
    except Drift as exc:
        print(f"handout: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
