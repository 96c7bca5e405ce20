"""``python -m agentkit serve-mcp --transport streamable-http`` as a real process, for the tests:
started on a free loopback port (``--port 0``), its URL read from its first stdout line, and
stopped with SIGINT (as Ctrl-C would) when the test is done."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Served:
    url: str  # what the server printed: with ?token=… when it made the token
    child: subprocess.Popen[str]

    @property
    def base(self) -> str:
        """The URL without its query (no token)."""
        return self.url.split("?", 1)[0]

    def stderr(self) -> str:
        """What the server logged (once it has stopped)."""
        assert self.child.stderr is not None
        return self.child.stderr.read()


@contextlib.contextmanager
def serve_http(workspace: Path, *flags: str, cwd: Path | None = None,
               env: dict[str, str] | None = None) -> Iterator[Served]:
    command = [sys.executable, "-m", "agentkit", "serve-mcp", "--transport", "streamable-http",
               "--port", "0", "--workspace", str(workspace), *flags]
    child = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
        env={**os.environ, "HOME": str(workspace.parent), **(env or {})},
    )
    watchdog = threading.Timer(60, child.kill)  # a server that never says its URL fails
    watchdog.start()
    try:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
    finally:
        watchdog.cancel()
    served = Served(url, child)
    try:
        assert url.startswith("http://"), (url, child.poll(), served.stderr() if child.poll() is not None else "")
        yield served
    finally:
        stop(child)


def stop(child: subprocess.Popen[str]) -> None:
    if child.poll() is None:
        child.send_signal(signal.SIGINT)
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    assert child.stdout is not None
    child.stdout.close()
