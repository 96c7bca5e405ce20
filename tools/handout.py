"""Build the class handout and the instructor's answer key as printable HTML (``make handout``).

    .venv/bin/python tools/handout.py [--out build]

writes ``build/handout.html`` (one A4 sheet, both sides: on the front the pipeline, the
side-effect levels, the error codes with ``retryable`` and the two key designs; on the back an
empty prediction grid for the failure matrix, rows tall enough to write in, which says the key
design of the matrix's tools, and the exit question) and ``build/answer_key.html`` (the
pre-flight line, the filled grid, its payment rows with their payments played for real, the
exit question with its answer, every exercise's hint and solution, every notebook's "Check
your understanding" and "Practice" with their answers, and the guide's live demo "audit
save_brief" played for real). Print them from the browser
(Ctrl+P; the handout: two pages, printed on both sides of one sheet).

Nothing is copied by hand, so nothing can drift: the codes and their ``retryable`` come from
``agentkit.boundary.errors`` (ErrorCode, RETRYABLE), the levels from ``Effect``, the grid from
``agentkit.demo.scenarios`` (FAILURES, CELLS) and ``data/failure_matrix.csv``, the key design
of the matrix's tools from ``agentkit.demo.harness.key_design`` (as the audit detects it), the
prose of each table from ``docs/design.md``, and the exit question from
``notebooks/INSTRUCTOR.md``. The build fails (exit 1, one line naming the mismatch) when
docs/design.md's tables and the code disagree.
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
INSTRUCTOR = NOTEBOOKS / "INSTRUCTOR.md"


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


def matrix_key_designs() -> list[tuple[str, str, list[str], list[str]]]:
    """(tool, key design, the arguments the "other payload" keeps, those it changes) for each
    write of the matrix, detected as ``agentkit.demo.audit`` detects a learner's tool's."""
    from agentkit.demo.harness import key_design
    from agentkit.demo.scenarios import ARGUMENTS, OTHER_PAYLOAD, Ledger, make_tool

    found = []
    for effect, other in OTHER_PAYLOAD.items():
        spec = make_tool(effect, Ledger())
        first = ARGUMENTS[effect]
        kept = [name for name in first if other.get(name) == first[name]]
        changed = [name for name in first if other.get(name) != first[name]]
        found.append((spec.name, key_design(spec, first, other), kept, changed))
    return found


def key_design_note() -> str:
    """One sentence: which key design the matrix's writes use, so "same key, other payload"
    has one answer (the grid's), not one per design."""
    parts = [f"<code>{html.escape(tool)}</code> (same <code>{html.escape(kept[0])}</code>, "
             f"other <code>{html.escape(', '.join(changed))}</code>): <b>{html.escape(design)}</b>"
             for tool, design, kept, changed in matrix_key_designs()]
    return ("<p class=\"note\">The matrix's writes and their key designs: " + "; ".join(parts)
            + ". Predict <i>same key, other payload</i> by that design (its column of the key designs).</p>")


def grid(answers: dict[tuple[str, str], str] | None = None) -> str:
    """The failure matrix as a table: "—" where a failure cannot happen at that level; blank
    cells to write in (``answers`` None: a line for the code, one for the calls), or the
    CSV's expectations (the answer key)."""
    from agentkit.demo.scenarios import CELLS, EFFECTS, FAILURES

    designs = sorted({design for _, design, _, _ in matrix_key_designs()})
    head = "".join(f"<th>{html.escape(e.replace('_', ' '))}</th>" for e in EFFECTS)
    body = []
    for failure in FAILURES:
        cells = []
        for effect in EFFECTS:
            if (failure, effect) not in CELLS:
                cells.append('<td class="dash">—</td>')
            elif answers is None:
                cells.append('<td class="blank"><span class="line">code</span>'
                             '<span class="line">handler calls</span></td>')
            else:
                cells.append(f"<td>{html.escape(answers[(failure, effect)])}</td>")
        label = html.escape(failure.replace("_", " "))
        if failure == "same_key_other_payload":
            label += f'<br><span class="sub">keys: {html.escape(" / ".join(designs))}</span>'
        body.append(f"<tr><th>{label}</th>{''.join(cells)}</tr>")
    kind = "grid blanks" if answers is None else "grid"
    return f'<table class="{kind}"><tr><th>failure</th>{head}</tr>{"".join(body)}</table>'


def matrix_answers() -> dict[tuple[str, str], str]:
    """The CSV's expectations per cell; the payment rows also say their payments, played for
    real (one handler call makes one payment or two: that is what those rows are about)."""
    from agentkit.demo.matrix import load_matrix, play
    from agentkit.demo.scenarios import PAYMENT_FAILURES

    answers = {}
    for r in load_matrix():
        answer = f"{r['expected']} · {r['handler_calls']} call(s)"
        if r["failure"] in PAYMENT_FAILURES:
            answer += f" · {play(r['failure'], r['effect']).writes} payment(s)"
        answers[(r["failure"], r["effect"])] = answer
    return answers


def exit_question(guide: str) -> tuple[str, str]:
    """(the question, its answer) as Markdown, from INSTRUCTOR.md's "**Exit question**"."""
    text = section(guide, "## Session objective and exit question")
    match = re.search(r"\*\*Exit question\*\*[^\n]*\n\n((?:> [^\n]*\n?)+)", text)
    answer = re.search(r"<details><summary>Answer</summary>\n(.*?)</details>", text, flags=re.DOTALL)
    if match is None or answer is None:
        raise Drift("notebooks/INSTRUCTOR.md has no exit question with its folded answer")
    question = " ".join(line[2:].strip() for line in match[1].splitlines())
    return question, answer[1].strip()


# ----------------------------------------------------------------------------- pages

STYLE = """
@page { size: A4; margin: 9mm; }
body { font: 8.3pt/1.25 system-ui, sans-serif; color: #111; max-width: 192mm; margin: 0 auto; }
h1 { font-size: 12pt; margin: 0 0 0.5mm; } h2 { font-size: 9pt; margin: 1.5mm 0 0.6mm; }
h3 { font-size: 8.4pt; margin: 2mm 0 0.6mm; }
table { border-collapse: collapse; width: 100%; margin-bottom: 0.5mm; }
th, td { border: 1px solid #999; padding: 0.3mm 1mm; text-align: left; vertical-align: top; }
th { background: #eee; } code { font-size: 0.92em; }
pre { font-size: 7.2pt; margin: 0 0 1mm; line-height: 1.15;
      white-space: pre-wrap; overflow-wrap: anywhere; }
/* The pipeline picture never wraps: each of its lines is one line on paper, in a monospace
   font that has the box-drawing arrows, small enough for half an A4 page (63 characters). */
pre.picture { white-space: pre; overflow-wrap: normal; font-size: 6.6pt;
              font-family: "DejaVu Sans Mono", "Liberation Mono", monospace; }
.two { display: grid; grid-template-columns: 1fr 1fr; gap: 3mm; }
.back { break-before: page; page-break-before: always; font-size: 9pt; }
.back h2 { font-size: 11pt; margin: 0 0 1.5mm; }
.grid td.dash { color: #999; text-align: center; background: #f6f6f6; vertical-align: middle; }
.grid th .sub { font-weight: normal; font-size: 7pt; color: #444; }
.blanks th:first-child { width: 34mm; }
.blanks td.blank { width: 52mm; height: 18mm; padding: 0 1.5mm; }
.blanks td.blank .line { display: block; height: 9mm; border-bottom: 1px dotted #aaa;
                         font-size: 6.5pt; color: #888; }
.blanks td.blank .line + .line { height: 8.5mm; }
.blanks th { font-size: 8.5pt; vertical-align: middle; }
.note { font-size: 8.5pt; margin: 1mm 0 2mm; }
.write { border-bottom: 1px solid #999; height: 9mm; }
.small { font-size: 8pt; color: #333; }
.answers details { margin: 1mm 0 3mm 4mm; } .answers summary { font-weight: bold; }
"""


def page(title: str, body: str) -> str:
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>\n"
            f"<body>\n{body}\n</body></html>\n")


def handout(design: str, guide: str | None = None) -> str:
    picture, stages = pipeline(design)
    levels = effects(design)
    codes = error_codes(design)
    designs = key_designs(design)
    question, _ = exit_question(INSTRUCTOR.read_text(encoding="utf-8") if guide is None else guide)
    parts = [
        ("<h1>One execution boundary around every tool "
        '<span class="small">· agentkit notebooks 00–07 · <i>a timeout does not prove that a '
        "write failed</i></span></h1>"),
        '<div class="two"><div>',
        "<h2>1. The pipeline: every attempt, in this order</h2>",
        f'<pre class="picture">{html.escape(picture)}</pre>',
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
        '<div class="back">',
        ("<h2>5. Predict the failure matrix: the code the model sees last, and the handler's "
         "real calls</h2>"),
        key_design_note(),
        grid(),
        "<h2>6. Exit question</h2>",
        f'<p class="note">{inline(question)}</p>',
        '<div class="write"></div>' * 4,
        "</div>",
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
            found.append((path.stem, "\n\n".join(parts).replace("## ", "#### ")))
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


def answer_key(design: str, notebooks: Sequence[Path], guide: str | None = None) -> str:
    question, answer = exit_question(INSTRUCTOR.read_text(encoding="utf-8") if guide is None else guide)
    parts = [
        "<h1>Answer key (instructor's copy)</h1>",
        ('<p class="small"><b>Pre-flight</b>, on the machine you present from: '
         "<code>.venv/bin/python -m agentkit matrix</code> plays every cell of the matrix and "
         "exits 0 when all match (1 names the cell that does not).</p>"),
        "<h2>The failure matrix, filled in (data/failure_matrix.csv)</h2>",
        key_design_note(),
        grid(matrix_answers()),
        "<h2>The exit question</h2>",
        f"<p>{inline(question)}</p>",
        f'<section class="answers">{markdown_html(answer)}</section>',
        "<h2>The guide's live demo: audit save_brief</h2>",
        save_brief_audit(),
        "<h2>Exercises (notebooks 06 and 07): hint and solution</h2>",
    ]
    for number, title, hint, solution in exercise_solutions():
        parts.append(f"<h3>Exercise {number}: {inline(title)}</h3>"
                     f"<p class=\"small\">Hint: {inline(hint)}</p>"
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
