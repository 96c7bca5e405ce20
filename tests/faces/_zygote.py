"""A parent for fresh processes that have the frameworks imported already (tests only).

``python _zygote.py MODULE...`` imports the given third-party modules (never agentkit) and then
reads requests, one JSON line each on stdin: ``{"argv": [SCRIPT, ARG...], "env": {...},
"stdout": PATH, "stderr": PATH}``. For each it forks a child that runs SCRIPT as ``__main__``
(``runpy.run_path``) with that argv and exactly that environment, stdout and stderr going to
the two files and stdin to ``/dev/null``, and that then leaves the way a ``python SCRIPT``
process leaves: an uncaught exception is a traceback and status 1, ``sys.exit`` its status,
threads joined and ``atexit`` run at the end of the interpreter, ``os._exit`` at once. The
zygote answers with one JSON line, ``{"status": N}`` (a signal: ``-SIGNUM``).

Nothing of one child reaches the next: the zygote itself never runs a script, it only imported
modules, so each child starts from the same state as a fresh interpreter that imported them
(``random`` reseeds itself in a forked child; no thread runs at the fork). What this saves is
the frameworks' import, a second or two of CPU per process (tests/faces/test_face_restarts.py
starts some fifty): a child costs ~0.2 s of CPU where a fresh ``python`` costs ~1.5 s.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import runpy
import select
import subprocess
import sys
from pathlib import Path
from typing import IO, Any

ZYGOTE = Path(__file__).resolve()


class Zygote:
    """The test's side: start the zygote, run scripts in its children, stop it."""

    def __init__(self, modules: list[str]) -> None:
        self.process = subprocess.Popen([sys.executable, str(ZYGOTE), *modules],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._answer(timeout=120)  # {"ready": ...}: the modules are imported

    def run(self, argv: list[str], env: dict[str, str], folder: Path,
            timeout: float) -> subprocess.CompletedProcess[str]:
        """What ``subprocess.run(argv, env=env, capture_output=True, text=True)`` gives, for
        ``argv = [sys.executable, SCRIPT, ARG...]`` (``folder`` holds the output files)."""
        executable, *script = argv
        assert executable == sys.executable, "the zygote runs scripts of this interpreter only"
        out, err = folder / "zygote.stdout", folder / "zygote.stderr"
        stdin: IO[str] | None = self.process.stdin
        assert stdin is not None
        stdin.write(json.dumps({"argv": script, "env": env, "stdout": str(out),
                                "stderr": str(err)}) + "\n")
        stdin.flush()
        status = self._answer(timeout)["status"]
        return subprocess.CompletedProcess(argv, status, out.read_text(encoding="utf-8"),
                                           err.read_text(encoding="utf-8"))

    def _answer(self, timeout: float) -> dict[str, Any]:
        stdout: IO[str] | None = self.process.stdout
        assert stdout is not None
        ready, _, _ = select.select([stdout], [], [], timeout)
        if not ready:
            self.process.kill()
            raise subprocess.TimeoutExpired(self.process.args, timeout)
        line = stdout.readline()
        assert line, f"the zygote ended (status {self.process.wait()})"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=60)
        if self.process.stdout is not None:
            self.process.stdout.close()


def serve(modules: list[str]) -> list[str] | None:
    """Answer requests until stdin closes (``None``); in a child, the argv it must run."""
    for name in modules:
        importlib.import_module(name)
    # What the imports made is never garbage: the children's collections (and the one at their
    # exit) skip it, and do not touch, so copy, every page of it (~1 s of CPU a child).
    gc.freeze()
    requests, answers = sys.stdin, sys.stdout
    answers.write(json.dumps({"ready": sorted(modules)}) + "\n")
    answers.flush()
    for line in requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            os.environ.clear()
            os.environ.update(request["env"])
            for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                                    (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                    (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
                opened = os.open(path, flags, 0o600)
                os.dup2(opened, fd)
                os.close(opened)
            argv: list[str] = request["argv"]
            return argv
        _, status = os.waitpid(pid, 0)
        answers.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")
        answers.flush()
    return None


if __name__ == "__main__":
    child_argv = serve(sys.argv[1:])
    if child_argv is not None:
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - the child's own fd 0
        sys.argv = child_argv
        del child_argv
        runpy.run_path(sys.argv[0], run_name="__main__")
