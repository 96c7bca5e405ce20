"""The official MCP conformance suite against ``serve-mcp --transport streamable-http`` (issue 44,
docs/design.md#mcp): ``@modelcontextprotocol/conformance`` (pinned), on Node >= 22 from the npm
registry, drives a real server process serving the suite's test tools written as agentkit
tools (tests/faces/_conformance_tools.py), with the token in its URL.

Every scenario of the suite (``--suite all``: the active ones and the pending ones) must pass,
with no failed check and no warning (the suite's own rule), except those tests/faces/mcp_conformance_baseline.json lists, each with its reason; a listed
scenario that passes is a stale entry and fails this test too (as it fails the suite's own
``--expected-failures``).

Marked ``interop`` and run by ``make test-interop`` (so by ``.ci/run``, which installs Node 22
from npm into :data:`TOOLS`). Node 22 and the suite are installed there with npm when missing;
when that cannot be done the tests skip, except under CI (``CI`` set), where they fail.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _http_serve import serve_http

pytestmark = pytest.mark.interop

#: Pinned, so a new release of the suite cannot change what this test means.
SUITE = "@modelcontextprotocol/conformance@0.1.16"
NODE = "node@22"
#: Where Node 22 and the suite are installed (``npm install --prefix``); .ci/run fills it.
TOOLS = Path(os.environ.get("AGENTKIT_NODE_TOOLS") or "~/.cache/agentkit/node22").expanduser()
HERE = Path(__file__).resolve().parent
BASELINE = HERE / "mcp_conformance_baseline.json"
SUITE_JS = TOOLS / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
#: What must pass whatever the baseline says: the scenarios issue 44 is about.
MUST_PASS = {"server-initialize", "ping", "tools-list", "tools-call-simple-text", "tools-call-error",
             "tools-call-elicitation", "logging-set-level", "tools-call-with-logging",
             "tools-call-with-progress", "dns-rebinding-protection", "server-sse-multiple-streams",
             "json-schema-2020-12"}


def unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"the MCP conformance suite must run in CI: {reason}")
    pytest.skip(reason)


def node_major(node: Path | str) -> int:
    try:
        done = subprocess.run([str(node), "--version"], capture_output=True, text=True,
                              timeout=60, check=False)
    except OSError:
        return 0
    match = re.match(r"v(\d+)\.", done.stdout.strip())
    return int(match.group(1)) if match else 0


def installed_suite_version() -> str | None:
    package = SUITE_JS.parent.parent / "package.json"
    try:
        return str(json.loads(package.read_text(encoding="utf-8"))["version"])
    except (OSError, ValueError, KeyError):
        return None


@pytest.fixture(scope="module")
def node() -> str:
    """Node >= 22 with the pinned suite beside it (installed with npm when missing)."""
    ours = TOOLS / "node_modules" / ".bin" / "node"
    if node_major(ours) < 22 or installed_suite_version() != SUITE.rsplit("@", 1)[1]:
        npm = shutil.which("npm")
        if npm is None:
            unavailable("npm is not installed (Debian: apt-get install nodejs npm)")
        TOOLS.mkdir(parents=True, exist_ok=True)
        try:
            done = subprocess.run(
                [str(npm), "install", "--no-audit", "--no-fund", "--prefix", str(TOOLS), NODE, SUITE],
                capture_output=True, text=True, timeout=600, check=False)
        except subprocess.TimeoutExpired:
            unavailable(f"npm could not install {NODE} and {SUITE} within 600 s")
        if done.returncode != 0:
            unavailable(f"npm could not install {NODE} and {SUITE}: {done.stderr[-500:]}")
    if node_major(ours) < 22:
        unavailable(f"{ours} is not Node >= 22 (npm install --prefix {TOOLS} {NODE})")
    return str(ours)


def suite(node: str, *arguments: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{Path(node).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "NO_COLOR": "1"}
    return subprocess.run([node, str(SUITE_JS), *arguments], capture_output=True, text=True,
                          timeout=timeout, check=False, env=env, cwd=TOOLS)


@pytest.fixture
def server_url(tmp_path: Path) -> Iterator[str]:
    """``python -m agentkit serve-mcp --transport streamable-http`` on a free loopback port,
    serving the suite's tools with elicited approvals; its URL (with the token it made)."""
    with serve_http(tmp_path / "ws", "--registry", "_conformance_tools:registry",
                    "--approvals", "elicit", cwd=HERE) as served:
        assert served.url.startswith("http://127.0.0.1:") and "/mcp?token=" in served.url
        yield served.url


def baseline() -> dict[str, str]:
    data: dict[str, Any] = json.loads(BASELINE.read_text(encoding="utf-8"))
    assert data["suite"] == SUITE
    failures: dict[str, str] = data["expected_failures"]
    return failures


def results(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """Each scenario's checks, from the suite's ``-o`` folder (``server-NAME-TIMESTAMP``)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for run in folder.iterdir():
        match = re.fullmatch(r"server-(.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z", run.name)
        assert match is not None, run.name
        out[match.group(1)] = json.loads((run / "checks.json").read_text(encoding="utf-8"))
    return out


def test_the_conformance_suite_passes_every_scenario_outside_the_baseline(
    node: str, server_url: str, tmp_path: Path
) -> None:
    expected = baseline()
    listed = tmp_path / "baseline.yml"  # the suite's own format: its exit status checks it too
    listed.write_text("server:\n" + "".join(f"  - {name}\n" for name in sorted(expected)),
                      encoding="utf-8")
    done = suite(node, "server", "--url", server_url, "--suite", "all",
                 "--expected-failures", str(listed), "-o", str(tmp_path / "results"))
    ran = results(tmp_path / "results")
    failed = {name: [c.get("errorMessage") or c.get("description") for c in checks
                     if c.get("status") in ("FAILURE", "WARNING")]  # (the suite's own rule)
              for name, checks in ran.items()}
    failed = {name: why for name, why in failed.items() if why}
    unexpected = {name: why for name, why in failed.items() if name not in expected}
    stale = sorted(name for name in expected if name in ran and name not in failed)
    assert unexpected == {}, f"scenarios that fail outside the baseline: {unexpected}"
    assert stale == [], f"baseline entries whose scenario passes (remove them): {stale}"
    assert set(expected) <= set(ran), f"baselined scenarios the suite no longer has: {set(expected) - set(ran)}"
    assert set(ran) - set(failed) >= MUST_PASS
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]


def test_the_baseline_names_scenarios_of_the_suite_each_with_its_reason(node: str) -> None:
    done = suite(node, "list", timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    server_part = done.stdout.split("Client scenarios")[0]
    scenarios = set(re.findall(r"^\s+- ([a-z0-9-]+)", server_part, re.MULTILINE))
    assert scenarios >= MUST_PASS
    for name, reason in baseline().items():
        assert name in scenarios, f"{name}: not a server scenario of {SUITE}"
        assert name not in MUST_PASS
        assert isinstance(reason, str) and len(reason) > 20, name
