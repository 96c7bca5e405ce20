"""Every ```python block of README.md and of the documentation pages (docs/, but for
docs/design.md, the contract, whose two snippets are quoted fragments) runs as written, so
neither can drift from the kit; tests/test_user_typing.py type-checks the same blocks.

How it works (for whoever adds a block to a page: nothing to register here):

- **Every block.** Each fenced block whose info string is ``python`` is a test of its own
  (``test_the_block_runs[docs/stores.md:LINE]``), found by its fence: there is no list of
  blocks and no way to leave one out. A fragment that cannot run is not a ``python`` block.
- **Not run offline.** A block that cannot run here (it needs a server this machine does not
  have) says so in a comment line of its own, ``# (not run offline: WHY)``: it is reported
  skipped with that reason, and still type-checked.
- **As a script.** The block's text, unchanged, is saved as a file and run with this venv's
  interpreter (``python BLOCK.py``) in a fresh subprocess: its own temporary working directory,
  ``HOME`` pointed at a temporary folder (so ``~/.my-server`` lands there), stdin empty (a
  server such as ``my_server.py`` serves, reads end-of-file and exits). It must exit 0 within
  :data:`TIMEOUT_SECONDS` with no traceback on stderr. So top-level ``await`` is a failure:
  a script says ``asyncio.run(main())``.
- **Files a block imports.** A block whose first line is a docstring that starts with a file
  name and a colon (``my_server.py: ...``) is also saved under that name beside every block,
  so a later block, on any page, may ``from my_server import registry`` as a reader who saved
  it would.
- **Its output.** A ``python`` block followed (after blank lines only) by a ```` ```text ````
  block must print exactly that text on stdout (trailing spaces aside). Write deterministic
  output there (no addresses, timings, temporary paths or random ids).
- **Models.** A block that needs a model uses its framework's own offline model in the block
  itself (``agents.testing.ScriptedModel``, Pydantic AI's ``FunctionModel``, a bindable
  ``GenericFakeChatModel``), with a comment saying what a real model takes; nothing is injected.
- **Servers.** A block that names ``postgresql://`` needs PostgreSQL: it runs with
  ``AGENTKIT_STORE`` set to a fresh, empty schema on ``AGENTKIT_TEST_PG_DSN``'s server (so
  write such a block to take its address from ``AGENTKIT_STORE``, the example address as its
  default); without that variable it is skipped with the reason, and under ``CI`` it fails.
  Every block runs with ``OTEL_EXPORTER_OTLP_ENDPOINT`` at a stand-in OTLP/HTTP collector that
  this test starts (it answers 200 to every POST), and a block that names ``OTLPSpanExporter``
  must have delivered spans to it.
- **Shell blocks** are not run, but every ``python -m agentkit ...`` command in a ```` ```bash ````
  block must parse with the kit's own command-line parser (subcommands, choices and flags that
  exist), read from ``agentkit.__main__`` so this test follows the CLI wherever it lives.
"""

from __future__ import annotations

import contextlib
import http.server
import importlib
import io
import os
import re
import shlex
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
#: The pages whose blocks run: the README and every documentation page but the contract.
PAGES = [README, *sorted(p for p in DOCS.rglob("*.md") if p != DOCS / "design.md")]
TIMEOUT_SECONDS = 180
PG_DSN = os.environ.get("AGENTKIT_TEST_PG_DSN", "")

FENCE = re.compile(r"^```([\w+-]*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
NAMED = re.compile(r'\A"""([\w.-]+\.py):')
NOT_RUN = re.compile(r"^# \(not run offline: (.+)\)$", re.MULTILINE)


@dataclass(frozen=True)
class Block:
    """A fenced block of the README: its language, its text, its first line's number."""

    language: str
    text: str
    line: int
    expected: str | None = None  # the ```text block that follows a python block, if any
    page: str = "README.md"  # where it is, relative to the repository

    @property
    def name(self) -> str | None:
        found = NAMED.match(self.text)
        return found.group(1) if found else None

    @property
    def not_run(self) -> str | None:
        """Why the block cannot run offline, when it says so (``# (not run offline: WHY)``)."""
        found = NOT_RUN.search(self.text)
        return found.group(1).strip() if found else None

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(text: str, page: str = "README.md") -> list[Block]:
    found: list[Block] = []
    matches = list(FENCE.finditer(text))
    for index, match in enumerate(matches):
        language, body = match.group(1), match.group(2)
        expected = None
        if language == "python" and index + 1 < len(matches):
            after = matches[index + 1]
            if after.group(1) == "text" and not text[match.end():after.start()].strip():
                expected = after.group(2)
        found.append(Block(language, body, text.count("\n", 0, match.start()) + 2, expected,
                           page))
    return found


ALL = [block for path in PAGES
       for block in blocks(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix())]
PYTHON = [block for block in ALL if block.language == "python"]
NAMED_FILES = {block.name: block.text for block in PYTHON if block.name}


def test_the_pages_have_python_blocks_and_each_named_file_once():
    assert len(PYTHON) >= 10, "the pages lost their python blocks (or this test, its way to find them)"
    assert [b for b in PYTHON if b.page == "README.md"], "the README lost its example"
    names = [block.name for block in PYTHON if block.name]
    assert len(names) == len(set(names)), f"two blocks name the same file: {names}"
    assert {"my_server.py", "durable_refunds.py", "refunds_agent.py"} <= set(NAMED_FILES)
    unrun = [block for block in PYTHON if block.not_run is not None]
    assert all(block.not_run for block in unrun), "a block says it is not run, but not why"
    assert len(unrun) <= 2, f"most blocks must run: {[b.where for b in unrun]}"


# ---------------------------------------------------------------- the stand-in OTLP collector


class Collector(http.server.ThreadingHTTPServer):
    """Answers 200 to every POST and remembers the paths it was sent to."""

    def __init__(self) -> None:
        self.posts: list[str] = []
        super().__init__(("127.0.0.1", 0), _CollectorHandler)

    @property
    def endpoint(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


class _CollectorHandler(http.server.BaseHTTPRequestHandler):
    server: Collector

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.posts.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass


@pytest.fixture
def collector() -> Iterator[Collector]:
    server = Collector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


# ---------------------------------------------------------------- PostgreSQL


@contextlib.contextmanager
def fresh_pg_schema() -> Iterator[str]:
    """A URL of the test server whose search_path is a new, empty schema (dropped afterwards)."""
    if not PG_DSN:
        if os.environ.get("CI"):
            pytest.fail("AGENTKIT_TEST_PG_DSN is not set, and CI needs the pages' PostgreSQL blocks run")
        pytest.skip("this block needs PostgreSQL: AGENTKIT_TEST_PG_DSN is not set "
                    "(run `make test-postgres`, or `eval \"$(tools/pg_cluster.sh start)\"`)")
    psycopg = pytest.importorskip("psycopg")
    from test_stores import ServerUse

    schema = f"readme_{uuid.uuid4().hex[:12]}"
    # this process uses the server: a test that restarts it waits for us
    with ServerUse.held(), psycopg.connect(PG_DSN, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
        try:
            separator = "&" if "?" in PG_DSN else "?"
            yield f"{PG_DSN}{separator}options={quote(f'-c search_path={schema}')}"
        finally:
            admin.execute(f"DROP SCHEMA {schema} CASCADE")


# ---------------------------------------------------------------- each python block


def block_id(block: Block) -> str:
    return block.where


@pytest.mark.parametrize("block", PYTHON, ids=block_id)
def test_the_block_runs(block: Block, tmp_path: Path, collector: Collector) -> None:
    if block.not_run is not None:
        pytest.skip(f"{block.where} is not run offline: {block.not_run} (it is type-checked)")
    folder = tmp_path / "run"
    folder.mkdir(parents=True)
    for name, text in NAMED_FILES.items():
        (folder / name).write_text(text, encoding="utf-8")
    script = folder / (block.name or f"block_{block.line}.py")
    script.write_text(block.text, encoding="utf-8")
    home = tmp_path / "home"
    home.mkdir(parents=True)
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("AGENTKIT_", "MY_SERVER_", "OTEL_"))}
    env.update(HOME=str(home), OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint,
               PYTHONDONTWRITEBYTECODE="1")
    with contextlib.ExitStack() as stack:
        if "postgresql://" in block.text:
            env["AGENTKIT_STORE"] = stack.enter_context(fresh_pg_schema())
        ran = subprocess.run([sys.executable, script.name], cwd=folder, env=env,
                             stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=TIMEOUT_SECONDS, check=False)
    where = block.where
    assert ran.returncode == 0, f"{where} exited {ran.returncode}:\n{ran.stderr}"
    assert "Traceback" not in ran.stderr, f"{where} printed a traceback:\n{ran.stderr}"
    if block.expected is not None:
        printed = [line.rstrip() for line in ran.stdout.rstrip().splitlines()]
        promised = [line.rstrip() for line in block.expected.rstrip().splitlines()]
        assert printed == promised, f"{where} printed something else than the page shows"
    if "OTLPSpanExporter" in block.text:
        assert "/v1/traces" in collector.posts, f"{where} sent no spans to the collector"


# ---------------------------------------------------------------- the shell blocks' commands

COMMAND = re.compile(r"\bpython3?\s+-m\s+agentkit\b(.*)")


def agentkit_commands(block: Block) -> list[list[str]]:
    """The arguments of every ``python -m agentkit ...`` line (backslash continuations joined,
    comments dropped) of a shell block."""
    text = block.text.replace("\\\n", " ")
    found = []
    for line in text.splitlines():
        match = COMMAND.search(line)
        if match:
            found.append(shlex.split(match.group(1), comments=True))
    return found


SHELL_COMMANDS = [(block, argv) for block in ALL if block.language in ("bash", "sh", "shell")
                  for argv in agentkit_commands(block)]


def the_kits_parser():
    main = importlib.import_module("agentkit.__main__").main
    return importlib.import_module(main.__module__).build_parser()


def test_the_shell_blocks_name_agentkit_commands():
    assert len(SHELL_COMMANDS) >= 5, "the pages' shell blocks lost their agentkit commands"


@pytest.mark.parametrize(("block", "argv"), SHELL_COMMANDS,
                         ids=[f"{b.where}:{' '.join(a[:2])}" for b, a in SHELL_COMMANDS])
def test_each_agentkit_command_of_a_shell_block_exists(block: Block, argv: list[str]) -> None:
    """Parsed, not run: its subcommand, choices and flags are the CLI's own."""
    said = io.StringIO()
    with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
        try:
            the_kits_parser().parse_args(argv)
        except SystemExit as exit:
            assert exit.code == 0, (f"{block.where}: `python -m agentkit "
                                    f"{shlex.join(argv)}` does not parse:\n{said.getvalue()}")


def test_a_command_that_does_not_exist_is_caught():
    """The check above can fail: a subcommand, an action or a flag the CLI lacks."""
    parser = the_kits_parser()
    for argv in (["approvals", "approvee"], ["no-such-command"], ["serve-mcp", "--no-such-flag"]):
        with contextlib.redirect_stderr(io.StringIO()), pytest.raises(SystemExit) as exit:
            parser.parse_args(argv)
        assert exit.value.code == 2


def test_a_broken_block_fails(tmp_path: Path, collector: Collector) -> None:
    """The runner of the blocks can fail: top-level await, an exception, the wrong output."""
    cases = [
        Block("python", "import asyncio\nawait asyncio.sleep(0)\n", 1),
        Block("python", "raise SystemExit('no')\n", 2),
        Block("python", "print('one')\n", 3, expected="two\n"),
    ]
    for case in cases:
        with pytest.raises(AssertionError):
            test_the_block_runs(case, tmp_path / str(case.line), collector)


def test_a_block_marked_not_run_is_skipped_with_its_reason(tmp_path: Path,
                                                           collector: Collector) -> None:
    marked = Block("python", "# (not run offline: needs a Temporal server)\nraise SystemExit(3)\n",
                   4, page="docs/x.md")
    assert marked.not_run == "needs a Temporal server"
    with pytest.raises(pytest.skip.Exception, match="needs a Temporal server"):
        test_the_block_runs(marked, tmp_path / "marked", collector)
    assert Block("python", "# not run offline, says nobody\n", 5).not_run is None
