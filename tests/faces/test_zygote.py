"""The zygote's children are what a fresh ``python SCRIPT`` would be (tests/faces/_zygote.py):
their own process, environment, argv and exit, and nothing left over from an earlier child."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _zygote import Zygote

SCRIPT = '''\
import atexit, json, os, sys
atexit.register(lambda: print("atexit ran", flush=True))
print(json.dumps({"pid": os.getpid(), "argv": sys.argv[1:], "env": os.environ.get("ZYGOTE_TEST"),
                  "keys": sorted(os.environ), "stdin": sys.stdin.read(), "left": getattr(json, "left_by_a_child", None),
                  "main": __name__}))
json.left_by_a_child = sys.argv[1]
how = sys.argv[1]
if how == "raise":
    raise RuntimeError("boom")
if how == "exit":
    sys.exit(3)
if how == "die":
    sys.stdout.flush()
    os._exit(1)
'''


@pytest.fixture
def zygote(tmp_path: Path) -> Iterator[tuple[Zygote, Path]]:
    (tmp_path / "script.py").write_text(SCRIPT, encoding="utf-8")
    zygote = Zygote(["json"])
    yield zygote, tmp_path
    zygote.close()


def run(zygote: tuple[Zygote, Path], how: str, **env: str):
    processes, folder = zygote
    done = processes.run([sys.executable, str(folder / "script.py"), how],
                         env={"PATH": os.environ.get("PATH", ""), **env}, folder=folder, timeout=60)
    first = done.stdout.splitlines()[0]
    return done, json.loads(first)


def test_each_child_is_a_fresh_process_with_only_its_own_environment(zygote) -> None:
    first, seen_first = run(zygote, "ok", ZYGOTE_TEST="one")
    second, seen_second = run(zygote, "ok")
    assert (first.returncode, second.returncode) == (0, 0)
    assert seen_first["pid"] != seen_second["pid"] != os.getpid()
    assert (seen_first["env"], seen_second["env"]) == ("one", None)
    assert (seen_first["keys"], seen_second["keys"]) == (["PATH", "ZYGOTE_TEST"], ["PATH"])
    assert seen_first["argv"] == seen_second["argv"] == ["ok"]
    assert seen_first["stdin"] == seen_second["stdin"] == ""
    assert seen_first["main"] == "__main__"
    assert seen_second["left"] is None  # what the first child changed in a module stayed there


def test_a_child_leaves_as_a_python_process_would(zygote) -> None:
    ok, _ = run(zygote, "ok")
    assert ok.stdout.splitlines()[-1] == "atexit ran" and ok.stderr == ""
    raised, _ = run(zygote, "raise")
    assert raised.returncode == 1
    assert "Traceback" in raised.stderr and "RuntimeError: boom" in raised.stderr
    assert raised.stdout.splitlines()[-1] == "atexit ran"
    exited, _ = run(zygote, "exit")
    assert exited.returncode == 3 and exited.stdout.splitlines()[-1] == "atexit ran"
    died, _ = run(zygote, "die")
    assert died.returncode == 1 and "atexit ran" not in died.stdout  # os._exit: nothing runs
