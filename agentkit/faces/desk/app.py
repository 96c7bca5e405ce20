"""The desk's web application (Starlette): the pages, the forms, the headers
(docs/design.md#approvals-desk).

Routes::

    GET  /login?token=T      the login (the URL the desk prints); a name form unless --approver
    POST /login              token and name: a session cookie, then the desk
    GET  /                   the waiting approvals and the calls in doubt (a session, else 403)
    GET  /state              {"version": …}: the page's script reloads when it changes
    POST /decide             approval_id, action (approve|deny), csrf: the CLI's decision
    POST /recheck            approval_id, csrf: ask the status lookup again
    POST /release            key, note, csrf: release a stale claim (keys release's checks)
    POST /logout             csrf
    GET  /static/…           the style sheet and the script (no data)

Every decision is :func:`agentkit.faces.approvals_command.decision` (or, for an approval a
DBOS workflow owns, :func:`agentkit.faces.dbos.route_decision`), run on a worker thread;
the page then redirects (POST-redirect-GET) and shows what it did. Every response carries a
Content-Security-Policy that allows no inline script and no other origin, and is never
cached; the page never puts a value a model wrote anywhere but escaped text.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Collection, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from agentkit.boundary.canonical import escape_invisible
from agentkit.faces.approvals_command import FOUR_EYES, Decided, decision
from agentkit.faces.desk.auth import COOKIE, Session, Sessions, name_problem
from agentkit.faces.desk.view import anchor_of, shown, snapshot
from agentkit.policy.approvals import PENDING, people_needed
from agentkit.policy.drivers import run_store_steps
from agentkit.policy.runner import ToolRunner
from agentkit.policy.stores import StoreError

__all__ = ["CSP", "create_app"]

log = logging.getLogger("agentkit.desk")

HERE = Path(__file__).parent
#: No inline script, no other origin, no frames, no plugins: the page's own files only.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),  # no other site sees the URL (and its token)
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
#: The longest note a release keeps (characters).
MAX_NOTE_CHARS = 500

ASGIApp = Callable[[MutableMapping[str, Any], Any, Any], Awaitable[None]]


class _SecurityHeaders:
    """Adds :data:`_HEADERS` to every response (pages, redirects, errors, static files)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in _HEADERS}
                message["headers"] = [
                    (n, v) for n, v in message.get("headers", []) if n.lower() not in names
                ] + _HEADERS
            await send(message)

        await self.app(scope, receive, with_headers)


class Desk:
    """The desk's state: the runner that decides, the sessions, and what the desk was told
    (the one approver, the four-eyes tools, DBOS's system database)."""

    def __init__(self, runner: ToolRunner, sessions: Sessions, *, approver: str | None,
                 four_eyes: Collection[str], dbos_system_database: str | None,
                 store_name: str) -> None:
        self.runner = runner
        self.sessions = sessions
        self.approver = approver
        self.four_eyes = frozenset(four_eyes)
        self.dbos_system_database = dbos_system_database
        self.store_name = store_name
        # Every value is escaped, in every template (not only .html by name): a value a model
        # wrote is only ever text. StrictUndefined: a template naming a missing value fails.
        env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(HERE / "templates")),
                                 autoescape=True, undefined=jinja2.StrictUndefined)
        self.templates = Jinja2Templates(env=env)

    # ---- pages

    async def login(self, request: Request) -> Response:
        token = request.query_params.get("token")
        if not self.sessions.token_ok(token):
            return self._refused(request, 403)
        if self.approver is not None:
            return self._logged_in(self.approver)
        return self._page(request, "login.html", {"token": token, "problem": None})

    async def login_post(self, request: Request) -> Response:
        form = await request.form()
        token, name = _field(form, "token"), _field(form, "name") or ""
        if not self.sessions.token_ok(token) or _cross_site(request):
            return self._refused(request, 403)
        who = self.approver if self.approver is not None else name
        problem = name_problem(who)
        if problem is not None:
            return self._page(request, "login.html", {"token": token, "problem": problem},
                              status=400)
        return self._logged_in(who)

    async def home(self, request: Request) -> Response:
        session = self._session(request)
        if session is None:
            return self._refused(request, 403)
        try:
            view = await run_in_threadpool(self._snapshot)
            audit = await run_in_threadpool(self._audit_tail)
        except StoreError as exc:
            return self._page(request, "trouble.html", {"problem": str(exc)}, status=503)
        messages, session.messages = session.messages, []
        return self._page(request, "desk.html", {
            "view": view, "who": shown(session.who), "csrf": session.csrf,
            "messages": messages, "store": self.store_name, "audit": audit,
            "four_eyes": sorted(shown(t) for t in self.four_eyes),
        })

    async def state(self, request: Request) -> Response:
        if self._session(request) is None:
            return JSONResponse({"error": "log in with the URL the desk printed"}, status_code=403)
        try:
            view = await run_in_threadpool(self._snapshot)
        except StoreError:
            return JSONResponse({"version": None}, status_code=503)
        return JSONResponse({"version": view.version})

    # ---- state-changing requests: the session and its CSRF token, or nothing happens

    async def decide(self, request: Request) -> Response:
        session, form = await self._checked(request)
        if session is None:
            return self._refused(request, 403)
        approval_id, action = _field(form, "approval_id"), _field(form, "action")
        if not approval_id or action not in ("approve", "deny"):
            return self._refused(request, 400, "an approval id and approve or deny")
        try:
            kind, text = await run_in_threadpool(self._decide, approval_id, action, session.who)
        except StoreError as exc:
            kind, text = "refused", f"the store cannot be used now: {exc}"
        session.messages.append((kind, text))
        return _back(anchor_of(approval_id))

    async def recheck(self, request: Request) -> Response:
        session, form = await self._checked(request)
        if session is None:
            return self._refused(request, 403)
        approval_id = _field(form, "approval_id")
        if not approval_id:
            return self._refused(request, 400, "an approval id")
        try:
            result = await run_in_threadpool(
                lambda: self.runner.recheck(approval_id, approver=session.who))
        except StoreError as exc:
            session.messages.append(("refused", f"the store cannot be used now: {exc}"))
            return _back("doubt")
        session.messages.append(_lookup_told(approval_id, result))
        return _back("doubt")

    async def release(self, request: Request) -> Response:
        session, form = await self._checked(request)
        if session is None:
            return self._refused(request, 403)
        key, note = _field(form, "key"), (_field(form, "note") or "").strip()
        if not key:
            return self._refused(request, 400, "a key")
        if not note or len(note) > MAX_NOTE_CHARS or not note.isprintable():
            session.messages.append(("refused", (f"release {shown(key)}: write a note (what you"
                                     f" checked; 1 to {MAX_NOTE_CHARS} printable characters)."
                                     " Nothing was released")))
            return _back("doubt")
        try:
            done = await run_in_threadpool(
                lambda: self.runner.store.release_stale(key, who=session.who, note=note))
        except StoreError as exc:
            session.messages.append(("refused", f"the store cannot be used now: {exc}"))
            return _back("doubt")
        session.messages.append(_release_told(key, done.outcome))
        return _back("doubt")

    async def logout(self, request: Request) -> Response:
        session, _ = await self._checked(request)
        if session is None:
            return self._refused(request, 403)
        self.sessions.close(request.cookies.get(COOKIE))
        response = self._refused(request, 200, "logged out")
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
        return response

    # ---- helpers

    def _decide(self, approval_id: str, action: str, who: str) -> tuple[str, str]:
        """The CLI's decision (or the DBOS route for a DBOS workflow's approval), told."""
        runner = self.runner
        record = runner.approvals.get(approval_id)
        owner = record.get("workflow") if record is not None else None
        if (isinstance(owner, dict) and owner.get("engine") == "dbos"
                and self.dbos_system_database and record is not None
                and record.get("state") == PENDING):
            return self._to_dbos(approval_id, action, who)
        done = decision(runner, approval_id, action, approver=who, four_eyes=self.four_eyes)
        return _told(approval_id, action, who, done)

    def _to_dbos(self, approval_id: str, action: str, who: str) -> tuple[str, str]:
        try:
            from agentkit.faces.dbos import DecisionNotSent, route_decision
        except ImportError as exc:
            return "refused", f"a DBOS workflow's decision needs the 'dbos' extra: {exc}"
        assert self.dbos_system_database is not None
        try:
            status, line = route_decision(self.runner.approvals, approval_id, action == "approve",
                                          system_database_url=self.dbos_system_database,
                                          approver=who)
        except DecisionNotSent as exc:
            status, line = 2, " ".join(str(exc).split())
        return ("ok" if status == 0 else "refused"), escape_invisible(line)

    def _snapshot(self) -> Any:
        runner = self.runner
        pending = run_store_steps(runner.store, runner.approvals.pending())
        for record in pending:  # four eyes: marked in the store, so every channel counts
            if record.get("tool") in self.four_eyes and people_needed(record) < FOUR_EYES:
                marked = run_store_steps(runner.store, runner.approvals.require(
                    record["approval_id"], FOUR_EYES))
                if marked is not None:
                    record.update(marked)
        return snapshot(runner.store, runner.registry, pending=pending)

    def _audit_tail(self) -> dict[str, Any]:
        """How many entries the audit log holds and its last hash (the page's footer)."""
        store = self.runner.store
        count, last = 0, None
        after = 0
        while True:
            rows = store.audit_page(after, 1000)
            if rows:
                count += len(rows)
                after, last = rows[-1][0], rows[-1][1]
            if len(rows) < 1000:
                break
        head = None
        if last is not None:
            try:
                head = str(json.loads(last).get("hash"))
            except ValueError:
                head = "(unreadable)"
        return {"entries": count, "head": head}

    def _session(self, request: Request) -> Session | None:
        return self.sessions.find(request.cookies.get(COOKIE))

    async def _checked(self, request: Request) -> tuple[Session | None, Any]:
        """A state-changing request's session, if its cookie, its CSRF token and where it
        came from all hold; else None (and nothing may change)."""
        session = self._session(request)
        if session is None or _cross_site(request):
            return None, None
        form = await request.form()
        if not self.sessions.csrf_ok(session, _field(form, "csrf")):
            log.warning("desk: a request without its CSRF token was refused (%s %s)",
                        request.method, request.url.path)
            return None, None
        return session, form

    def _logged_in(self, who: str) -> Response:
        cookie, _ = self.sessions.open(who)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, cookie, httponly=True, samesite="strict", path="/")
        return response

    def _refused(self, request: Request, status: int, why: str | None = None) -> Response:
        return self._page(request, "refused.html", {"status": status, "why": why}, status=status)

    def _page(self, request: Request, name: str, context: dict[str, Any],
              status: int = 200) -> Response:
        return self.templates.TemplateResponse(request, name, context, status_code=status)


def create_app(runner: ToolRunner, *, token: str, approver: str | None = None,
               four_eyes: Collection[str] = (), dbos_system_database: str | None = None,
               allowed_hosts: Collection[str] | None = None,
               store_name: str = "the store") -> Starlette:
    """The desk for ``runner`` (its store and registry decide), behind the login ``token``.

    ``approver``: the one person who decides (no name asked at login); ``four_eyes``: tools
    whose approvals need two different people; ``dbos_system_database``: where a DBOS
    workflow's decision is sent; ``allowed_hosts``: the ``Host`` headers served (None: any;
    the command gives the loopback's names when it listens there, against DNS rebinding)."""
    desk = Desk(runner, Sessions(token), approver=approver, four_eyes=four_eyes,
                dbos_system_database=dbos_system_database, store_name=store_name)
    routes = [
        Route("/login", desk.login, methods=["GET"]),
        Route("/login", desk.login_post, methods=["POST"]),
        Route("/", desk.home, methods=["GET"]),
        Route("/state", desk.state, methods=["GET"]),
        Route("/decide", desk.decide, methods=["POST"]),
        Route("/recheck", desk.recheck, methods=["POST"]),
        Route("/release", desk.release, methods=["POST"]),
        Route("/logout", desk.logout, methods=["POST"]),
        Mount("/static", app=StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    middleware = [Middleware(_SecurityHeaders)]
    if allowed_hosts is not None:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts)))
    app = Starlette(routes=routes, middleware=middleware)
    app.state.desk = desk
    return app


def _field(form: Any, name: str) -> str | None:
    value = form.get(name) if form is not None else None
    return value if isinstance(value, str) else None


def _cross_site(request: Request) -> bool:
    """A request the browser says came from another site (``Sec-Fetch-Site``), or, from a
    browser that does not say, whose ``Origin`` is another one (or opaque)."""
    fetched = request.headers.get("sec-fetch-site")
    if fetched is not None:
        return fetched not in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return False
    host = request.headers.get("host", "")
    return origin == "null" or urlsplit(origin).netloc != host


def _back(anchor: str) -> Response:
    return RedirectResponse(f"/#{anchor}", status_code=303)


def _told(approval_id: str, action: str, who: str, done: Decided) -> tuple[str, str]:
    """What the person who decided is told, as (kind, text): ``ok``, ``info`` or ``refused``."""
    shown_id, name = shown(approval_id), shown(who)
    result = done.result
    if result is None:  # refused, nothing decided
        return "refused", escape_invisible(done.line or f"{shown_id}: nothing was decided")
    if done.line is not None:
        return ("info" if done.status == 0 else "refused"), escape_invisible(done.line)
    if action == "deny":
        if done.status == 0:
            return "ok", f"{shown_id}: denied by {name}; nothing ran"
        return "refused", f"{shown_id}: the deny did not settle it ({shown(result.get('error'))})"
    if result.get("ok"):
        return "ok", (f"{shown_id}: approved by {name}; it ran once, ok"
                      f" ({result.get('attempts', 0)} attempt)")
    return "refused", (f"{shown_id}: approved by {name}; its run ended"
                       f" {shown(result.get('error'))} (not retryable: see the calls in doubt)")


def _lookup_told(approval_id: str, result: dict[str, Any]) -> tuple[str, str]:
    shown_id = shown(approval_id)
    if result.get("ok"):
        return "ok", f"{shown_id}: the status lookup says it was done: its receipt is kept"
    code = shown(result.get("error"))
    if code == "transient_failure":
        return "info", (f"{shown_id}: the status lookup says it was not done: nothing was sent;"
                        " the key is free (the call asked again gets a new approval)")
    if code == "outcome_unknown":
        return "refused", f"{shown_id}: the status lookup still cannot say: still in doubt"
    return "refused", f"{shown_id}: {code}"


def _release_told(key: str, outcome: str) -> tuple[str, str]:
    shown_key = shown(key)
    return {
        "released": ("ok", (f"released the stale claim on {shown_key}, with your note in the audit"
                           " log: the next call asks its status lookup, or runs it")),
        "completed": ("refused", f"{shown_key} is completed, not claimed: nothing to release"),
        "unknown": ("refused", f"{shown_key}: no such key in the store (released already?)"),
        "live": ("refused", (f"{shown_key}: its claim is live (the owner may still be writing):"
                            " release it once it is stale")),
    }.get(outcome, ("refused", f"{shown_key}: {shown(outcome)}"))
