"""The project documents its own contract: docs/design.md, and references that resolve.

- every section of ``docs/design.md`` has a stable anchor listed in its contents table;
- every ``design.md#anchor`` written anywhere in the repository (code, tests, README,
  INSTRUCTOR.md, notebooks, pyproject) names an anchor the page really has;
- nothing points at the design document outside the repository any more;
- relative links in the Markdown files resolve in the clone;
- the documentation site (mkdocs.yml, ``make docs``) builds strict and offline, lists every
  page of docs/ and documents every public name.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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


# ---------------------------------------------------------------- the documentation site

MKDOCS_YML = ROOT / "mkdocs.yml"


def _mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """``make docs``'s command (strict), into ``site``."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
         "--site-dir", str(site)],
        cwd=config.parent, env=env, capture_output=True, text=True, timeout=300, check=False,
    )


def _nav_pages(nav: object) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in _nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    return []


def _config() -> dict[str, object]:
    yaml = pytest.importorskip("yaml")
    loaded = yaml.safe_load(MKDOCS_YML.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def test_every_page_is_in_the_nav_and_every_door_host_and_engine_has_its_page() -> None:
    config = _config()
    assert config["docs_dir"] == "docs" and config["site_dir"] == "build/site"
    assert config["strict"] is True
    nav = _nav_pages(config["nav"])
    pages = sorted(p.relative_to(DESIGN.parent).as_posix() for p in DESIGN.parent.rglob("*.md"))
    assert sorted(nav) == pages, f"in docs/ only: {set(pages) - set(nav)}; nav only: {set(nav) - set(pages)}"
    for page in ("learner.md", "practitioner.md", "install.md", "hosts/mcp.md",
                 "hosts/openai-agents.md", "hosts/pydantic-ai.md", "hosts/langgraph.md",
                 "engines/dbos.md", "engines/temporal.md", "stores.md", "approvals.md",
                 "design.md", "reference/agentkit.md", "reference/faces.md"):
        assert page in nav, page
    theme = config["theme"]
    assert isinstance(theme, dict) and theme["name"] == "material" and theme["font"] is False
    plugins = [p if isinstance(p, str) else next(iter(p)) for p in config["plugins"]]
    assert {"offline", "mkdocstrings", "search"} <= set(plugins), plugins


def test_the_api_reference_is_generated_from_the_public_names() -> None:
    import agentkit

    text = (DESIGN.parent / "reference" / "agentkit.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^::: agentkit\.(\w+)$", text, re.MULTILINE))
    assert documented == set(agentkit.__all__), set(agentkit.__all__) ^ documented


def test_make_docs_builds_strict_offline_and_renders_the_reference(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    built = _mkdocs_build(MKDOCS_YML, tmp_path / "site")
    assert built.returncode == 0, built.stdout + built.stderr
    reference = (tmp_path / "site" / "reference" / "agentkit.html").read_text(encoding="utf-8")
    assert 'id="agentkit.ToolSpec"' in reference and 'id="agentkit.ToolRunner"' in reference
    faces = (tmp_path / "site" / "reference" / "faces.html").read_text(encoding="utf-8")
    assert 'id="agentkit.faces.dbos.DurableTools"' in faces
    design = (tmp_path / "site" / "design.html").read_text(encoding="utf-8")
    assert 'id="runner-policy"' in design
    for page in (tmp_path / "site").rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        assert "fonts.googleapis" not in html and "fonts.gstatic" not in html, page


def test_a_broken_link_or_anchor_fails_the_build(tmp_path: Path) -> None:
    """The strictness is real: a copy of the docs with one broken link, then one broken anchor."""
    pytest.importorskip("mkdocs")
    for broken in ("[gone](no-such-page.md)", "[gone](design.md#no-such-section)"):
        copy = tmp_path / str(abs(hash(broken)))
        shutil.copytree(DESIGN.parent, copy / "docs")
        shutil.copy2(MKDOCS_YML, copy / "mkdocs.yml")
        (copy / "agentkit").symlink_to(ROOT / "agentkit")
        page = copy / "docs" / "install.md"
        page.write_text(page.read_text(encoding="utf-8") + f"\n{broken}\n", encoding="utf-8")
        built = _mkdocs_build(copy / "mkdocs.yml", copy / "site")
        assert built.returncode != 0, f"{broken} did not fail the build"
        assert "no-such" in built.stdout + built.stderr
