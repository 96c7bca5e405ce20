"""Save the README's picture of the FailureExplorer: ``docs/explorer.png``.

    .venv/bin/python tests/browser/screenshot.py [--out docs/explorer.png]

It does what the browser suite does (a temporary copy of the notebooks, ``jupyter lab`` from
this venv, Debian's headless ``chromium``), opens the notebook that displays the explorer,
runs all its cells, plays *transient disconnect × reversible write*, and saves the
explorer alone (cropped to the widget down to its result, at most ``--max-height`` pixels
tall). Re-run it when the explorer's look changes, and commit the PNG.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import labdriver as lab

MAX_BYTES = 150_000


def find_notebook(folder: Path, needle: str = "FailureExplorer(", prefer: str = "05") -> str:
    names = sorted(lab.notebook_names(folder), key=lambda n: (not n.startswith(prefer), n))
    for name in names:
        nb = lab.read_ipynb(folder / name)
        if any(needle in "".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"):
            return name
    raise SystemExit(f"no notebook in {folder} has a code cell with {needle!r}")


def shrink(path: Path) -> None:
    """Chromium writes loose PNGs; a 256-colour palette keeps text sharp at a fraction."""
    from PIL import Image

    with Image.open(path) as image:
        small = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    small.save(path, optimize=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=lab.ROOT / "docs" / "explorer.png")
    parser.add_argument("--failure", default="transient_disconnect")
    parser.add_argument("--effect", default="reversible_write")
    parser.add_argument("--width", type=int, default=1200, help="browser viewport width (px)")
    parser.add_argument("--max-height", type=int, default=560, help="crop the widget to this height (px)")
    args = parser.parse_args(argv)

    from playwright.sync_api import expect, sync_playwright

    from agentkit.demo.matrix import label

    with tempfile.TemporaryDirectory(prefix="agentkit-shot-") as tmp:
        work = Path(tmp)
        root_dir = lab.copy_notebooks(work / "notebooks")
        name = find_notebook(root_dir)
        with lab.LabServer(root_dir, work) as server, sync_playwright() as playwright:
            browser = lab.launch_browser(playwright)
            try:
                context = browser.new_context(viewport={"width": args.width, "height": 900}, device_scale_factor=1)
                nb = lab.open_notebook(context, server.url, name, lab.read_ipynb(root_dir / name))
                nb.page.evaluate("() => window.jupyterapp && window.jupyterapp.shell.collapseLeft()")
                lab.run_all_cells(nb)
                found = lab.problems(nb)
                if found:
                    print(f"warning: {name} after Run All:\n- " + "\n- ".join(found), file=sys.stderr)
                root = lab.widget_root(nb, "agentkit-failure-explorer")
                lab.choose(root, "Failure", label(args.failure))
                lab.choose(root, "Effect", label(args.effect))
                result = root.locator(".agentkit-explorer-result")
                result.evaluate("e => { for (const c of e.querySelectorAll('.widget-html-content')) c.innerHTML = ''; }")
                lab.button(root, "Run").first.click()
                expect(result).to_contain_text("handler calls:", timeout=lab.WIDGET_TIMEOUT * 1000)
                expect(root.locator(".agentkit-explorer-status")).to_contain_text("Played")
                nb.page.mouse.move(0, 0)  # no hover highlight on the button
                # Scroll the widget to the top of the notebook, then clip the page to what it
                # draws: its own box, narrowed to its widest child, at most --max-height tall.
                root.evaluate("e => e.scrollIntoView({block: 'start'})")
                nb.page.wait_for_timeout(300)
                box = root.bounding_box()
                assert box is not None, "the explorer is not visible"
                right = root.evaluate(
                    "e => Math.max(...Array.from(e.querySelectorAll('*')).map(c => c.getBoundingClientRect().right))"
                )
                width = min(box["width"], right - box["x"] + 8)
                # The pickers, the status and the result; the runner's trace below is left out.
                result_box = result.bounding_box() or box
                height = min(result_box["y"] + result_box["height"] - box["y"] + 6, box["height"], args.max_height)
                args.out.parent.mkdir(parents=True, exist_ok=True)
                nb.page.screenshot(
                    path=str(args.out),
                    clip={"x": box["x"], "y": box["y"], "width": width, "height": height},
                    animations="disabled",
                )
            finally:
                browser.close()
    shrink(args.out)
    size = args.out.stat().st_size
    print(f"{args.out}: {size / 1000:.0f} KB")
    if size > MAX_BYTES:
        print(f"warning: over {MAX_BYTES // 1000} KB; try a smaller --max-height or --width", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
