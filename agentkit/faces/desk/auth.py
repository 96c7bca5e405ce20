"""Who may use the desk: the login token, sessions and CSRF tokens (docs/design.md#approvals-desk).

A web page on a developer's machine is reachable by every other page the browser opens, so:

- **The token.** The desk prints one URL with a random login token (as Jupyter does). Without
  it nothing is shown and nothing is decided: every page but the login answers 403 and shows
  no approval. Tokens are compared in constant time.
- **The session.** Logging in (the token, and a name unless the desk was started with
  ``--approver``) sets a session cookie: random, ``HttpOnly`` (no script reads it),
  ``SameSite=Strict`` (no other site's page or form sends it), path ``/``. Sessions live in
  this process, expire after :data:`SESSION_SECONDS` idle, and end with it.
- **CSRF.** Each session has its own random CSRF token, put in every form the page shows;
  a state-changing request (approve, deny, ask the lookup, release, log out) without the
  session *and* that token is refused with 403 and changes nothing. A request that a browser
  marks as cross-site (``Sec-Fetch-Site``) or whose ``Origin`` is another site is refused too.
- **The name.** A person's name is what they say it is (the token holder is trusted to
  name themselves); it must be printable, with no invisible or reordering character, 1 to 80
  characters. It is kept with each decision and in the audit log.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from agentkit.policy.approvals import MAX_APPROVER_CHARS

__all__ = ["COOKIE", "SESSION_SECONDS", "Session", "Sessions", "name_problem"]

#: The session cookie's name.
COOKIE = "agentkit_desk"
#: A session unused this long (seconds) is forgotten: log in again with the URL.
SESSION_SECONDS = 12 * 3600.0


@dataclass
class Session:
    """One person logged in: their name, the CSRF token of their forms, and the messages
    waiting to be shown on their next page (what their last decision did)."""

    who: str
    csrf: str
    seen: float
    messages: list[tuple[str, str]] = field(default_factory=list)


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a person on the desk, or None."""
    if not name or name != name.strip():
        return "give a name (no leading or trailing spaces)"
    if len(name) > MAX_APPROVER_CHARS:
        return f"a name is at most {MAX_APPROVER_CHARS} characters"
    if not name.isprintable():
        return "a name has no invisible, reordering or control characters"
    return None


class Sessions:
    """The desk's login token and its sessions (thread-safe: the desk's endpoints run on a
    thread pool)."""

    def __init__(self, token: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        if len(token) < 16:
            raise ValueError("a login token has at least 16 characters")
        self.token = token
        self._clock = clock
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}

    def token_ok(self, given: str | None) -> bool:
        return isinstance(given, str) and secrets.compare_digest(
            given.encode("utf-8", "surrogateescape"), self.token.encode("utf-8"))

    def open(self, who: str) -> tuple[str, Session]:
        """A new session for ``who``: its cookie value and the session."""
        cookie = secrets.token_urlsafe(32)
        session = Session(who, secrets.token_urlsafe(32), self._clock())
        with self._lock:
            self._forget_idle()
            self._sessions[cookie] = session
        return cookie, session

    def find(self, cookie: str | None) -> Session | None:
        """The live session of this cookie, or None."""
        if not cookie:
            return None
        with self._lock:
            self._forget_idle()
            session = self._sessions.get(cookie)
            if session is not None:
                session.seen = self._clock()
            return session

    def close(self, cookie: str | None) -> None:
        with self._lock:
            self._sessions.pop(cookie or "", None)

    @staticmethod
    def csrf_ok(session: Session, given: str | None) -> bool:
        return isinstance(given, str) and secrets.compare_digest(
            given.encode("utf-8", "surrogateescape"), session.csrf.encode("utf-8"))

    def _forget_idle(self) -> None:
        cutoff = self._clock() - SESSION_SECONDS
        for cookie in [c for c, s in self._sessions.items() if s.seen < cutoff]:
            del self._sessions[cookie]
