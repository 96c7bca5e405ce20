"""Who owns a claim, and whether that owner is provably gone (the process-liveness probe).

Why a claim records its owner
    A claim must never be taken over while its owner may still be running, or two writers
    run at once. A lease alone cannot know that a process was killed a second after it
    claimed (the key would be stuck for the whole lease), and a pid alone is reused by the
    operating system. So a claim records the host, the pid and the process start time
    (field 22 of ``/proc/<pid>/stat``), and a lease deadline. It is stale when the lease has
    passed, or when the owner is provably gone: same host, and the pid no longer exists, is
    a zombie, or belongs to a process that started at another time (a container restart
    gives the new process the old pid). A claim from another host is judged by its lease
    alone: a pid means nothing across machines. The memory store lives and dies with its
    process, so only the lease applies there.
"""

from __future__ import annotations

import os
import socket

__all__ = ["owner_gone", "proc_stat", "this_host", "this_process"]


def this_host() -> str:
    """The name a claim records as its owner's host."""
    return socket.gethostname()


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks) of a Linux process, or None where /proc says nothing.

    The command name (field 2) may contain spaces and parentheses, so fields are counted
    from the last ")".
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        fields = data[data.rindex(b")") + 2 :].split()
        return fields[0].decode("ascii", "replace"), int(fields[19])  # fields 3 and 22
    except (OSError, ValueError, IndexError):
        return None


_identity: list[tuple[int, int | None]] = []  # this process's (pid, start time), cached


def this_process() -> tuple[int, int | None]:
    """This process's (pid, start time); recomputed after a fork, since the pid changed.

    Cached, and forgotten in a forked child, so the hot path makes no system call (a
    ``getpid`` costs microseconds in some sandboxes)."""
    if not _identity:
        pid = os.getpid()
        stat = proc_stat(pid)
        _identity[:] = [(pid, stat[1] if stat else None)]
    return _identity[0]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_identity.clear)


def owner_gone(host: str, pid: int, start_time: int | None, *, local_host: str) -> bool:
    """True only when the owner is *provably* gone; any doubt leaves it to the lease."""
    if host != local_host or pid <= 0:
        return False  # another machine's processes cannot be seen from here
    my_pid, my_start = this_process()
    if pid == my_pid:
        # Our own process is never gone, but an earlier process with our pid is.
        return None not in (start_time, my_start) and start_time != my_start
    if os.name != "posix":
        return False  # os.kill(pid, 0) would *terminate* the process on Windows
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # it exists, under another user
    except OSError:
        return False
    stat = proc_stat(pid)
    if stat is None:
        return False  # no /proc (macOS): the pid exists, trust the lease
    state, start = stat
    if state in ("Z", "X"):
        return True  # exited, not yet reaped by its parent
    return start_time is not None and start != start_time
