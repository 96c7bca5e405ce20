"""``python -m agentkit desk`` (docs/design.md#approvals-desk): it listens on the loopback,
prints one URL with the login token and nothing else on stdout, and every failure to start
is one line with exit status 2."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agentkit import ToolRunner
from agentkit.faces import cli
from agentkit.faces.desk.command import loopback_hosts

HERE = Path(__file__).parent


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "desk.sqlite3"
    cli.workspace_runner(tmp_path, store=path).store.close()
    return path


def one_line(text: str) -> str:
    assert text.endswith("\n") and text.count("\n") == 1 and "Traceback" not in text, text
    return text.strip()


@pytest.mark.parametrize(("extra", "says"), [
    (["--four-eyes", "no_such_tool"], "--four-eyes: not in the loaded registry: no_such_tool"),
    (["--approver", "al\u202eice"], "--approver: a name has no invisible"),
    (["--token", "short"], "at least 16 characters"),
    (["--registry", "no_such_module:registry"], "cannot import no_such_module"),
])
def test_a_desk_that_cannot_start_says_why_in_one_line(
        store: Path, extra: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["desk", "--store", str(store), *extra]) == 2
    captured = capsys.readouterr()
    assert says in one_line(captured.err) and captured.out == ""


def test_a_missing_store_is_refused_and_nothing_is_made(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["desk", "--store", str(tmp_path / "none.sqlite3")]) == 2
    assert "no such store" in one_line(capsys.readouterr().err)
    assert not (tmp_path / "none.sqlite3").exists()


def test_a_port_in_use_is_one_line(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert cli.main(["desk", "--store", str(store), "--port", str(port)]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in one_line(capsys.readouterr().err)


def test_only_the_loopback_names_are_served_on_the_loopback() -> None:
    assert "localhost" in (loopback_hosts("127.0.0.1", 1) or [])
    assert loopback_hosts("::1", 1) is not None
    assert loopback_hosts("0.0.0.0", 1) is None and loopback_hosts("192.168.1.5", 1) is None


def test_the_desk_prints_one_url_and_serves_it(store: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
           "DESK_LEDGER": str(tmp_path / "ledger.jsonl")}
    sys.path.insert(0, str(HERE))
    try:
        import _desk_ledger
    finally:
        sys.path.remove(str(HERE))
    model = ToolRunner(_desk_ledger.registry(), store=cli.open_command_store(
        tmp_path, store, create=False)[0])
    approval_id = model.call("pay", {"to": "ana", "cents": 5})["approval_id"]
    process = subprocess.Popen(
        [sys.executable, "-m", "agentkit", "desk", "--store", str(store), "--port", "0",
         "--registry", "_desk_ledger:registry"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and "/login?token=" in url
        base = url.split("/login")[0]
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(base + "/", timeout=10)
        assert refused.value.code == 403
        with urllib.request.urlopen(url, timeout=10) as page:  # the name form
            assert page.status == 200 and b'name="name"' in page.read()
        assert approval_id not in refused.value.read().decode()
    finally:
        process.terminate()
        process.wait(10)
        model.store.close()
    assert process.stderr is not None
    err = process.stderr.read()
    assert "Traceback" not in err and "store " in err
