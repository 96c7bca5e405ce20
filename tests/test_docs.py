"""The project documents its own contract: docs/design.md, and references that resolve.

- every section of ``docs/design.md`` has a stable anchor listed in its contents table;
- every ``design.md#anchor`` written anywhere in the repository (code, tests, README,
  INSTRUCTOR.md, notebooks, pyproject) names an anchor the page really has;
- nothing points at the design document outside the repository any more;
- relative links in the Markdown files resolve in the clone.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
#: The text files a reference can hide in.
SUFFIXES = {".py", ".md", ".ipynb", ".toml", ".cfg", ".yml", ".yaml", ".txt", ".csv", ".sh",
            ".json"}
NAMES = {"Makefile", "run"}
SKIP = {".venv", ".git", "build", "node_modules", ".hypothesis", ".pytest_cache", "workspace",
        "test-artifacts", ".ipynb_checkpoints", "__pycache__"}


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading (lower case, punctuation dropped)."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def without_code(markdown: str) -> str:
    """The page without its fenced code blocks (a `#` line in code is not a heading)."""
    return re.sub(r"^```.*?^```", "", markdown, flags=re.DOTALL | re.MULTILINE)


def anchors(markdown: str) -> list[str]:
    text = without_code(markdown)
    slugs = [github_slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE)]
    return slugs + re.findall(r"<a id=\"([\w-]+)\"", text)


def project_files() -> list[Path]:
    found = []
    for path in ROOT.rglob("*"):
        parts = set(path.relative_to(ROOT).parts)
        if parts & SKIP or any(p.endswith(".egg-info") for p in parts) or not path.is_file():
            continue
        if (path.suffix in SUFFIXES or path.name in NAMES) and path != Path(__file__).resolve():
            found.append(path)
    return found


def test_every_section_has_a_unique_listed_anchor() -> None:
    text = DESIGN.read_text(encoding="utf-8")
    found = anchors(text)
    assert len(found) == len(set(found)), "two headings share an anchor"
    sections = [github_slug(h) for h in re.findall(r"^## (.+)$", text, re.MULTILINE)]
    listed = re.findall(r"^\| \[`#([\w-]+)`\]\(#\1\) \|", text, re.MULTILINE)
    sections.remove("contents")
    assert [a for a in listed if a in sections] == sections, "a section is not in the contents"
    assert set(listed) <= set(found), sorted(set(listed) - set(found))
    pinned = {"pipeline", "layers", "public-api", "result-shape", "error-codes", "runner-policy",
              "stores", "store-failures", "approvals", "async-path", "timeouts", "failure-matrix"}
    assert pinned <= set(found), sorted(pinned - set(found))


def test_every_reference_into_the_design_page_resolves() -> None:
    known = set(anchors(DESIGN.read_text(encoding="utf-8")))
    references = 0
    broken = []
    for path in project_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for anchor in re.findall(r"design\.md#([\w-]+)", text):
            references += 1
            if anchor not in known:
                broken.append(f"{path.relative_to(ROOT)}: #{anchor}")
    assert references >= 10, "expected the code, tests and README to point into docs/design.md"
    assert not broken, broken


def test_nothing_points_outside_the_repository() -> None:
    outside = ["DESIGN" + " §", "DESIGN" + ".md", "shared" + "/DESIGN", "course's shared folder"]
    hits = []
    for path in project_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        hits += [f"{path.relative_to(ROOT)}: {n!r}" for n in outside if n in text]
    assert not hits, hits


def test_relative_markdown_links_resolve() -> None:
    pages = [ROOT / "README.md", DESIGN, ROOT / "notebooks" / "INSTRUCTOR.md"]
    broken = []
    for page in pages:
        text = without_code(page.read_text(encoding="utf-8"))
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a web address, or an anchor on the same page (checked above)
            file_part, _, anchor = target.partition("#")
            resolved = (page.parent / file_part).resolve()
            known = anchors(DESIGN.read_text(encoding="utf-8")) if resolved == DESIGN else []
            if not resolved.exists() or (anchor and resolved == DESIGN and anchor not in known):
                broken.append(f"{page.name}: {target}")
    assert not broken, broken
