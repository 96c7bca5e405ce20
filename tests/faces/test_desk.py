"""The approvals desk over HTTP (docs/design.md#approvals-desk), with Starlette's TestClient:
nothing without the token, nothing decided without the session and its CSRF token, hostile
arguments shown inert, and Approve/Deny exactly the CLI's decisions — every test counting
the real payments."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
from starlette.testclient import TestClient

from agentkit import ToolRegistry, ToolRunner, ToolSpec
from agentkit.faces.desk.app import CSP, create_app
from agentkit.faces.desk.command import loopback_hosts
from agentkit.policy.drivers import run_store_steps
from agentkit.policy.stores import SQLiteIdempotencyStore
from agentkit.policy.stores.audit import export_lines, verify_lines

TOKEN = "desk-token-" + "x" * 24
BASE = "http://127.0.0.1:8765"
HOSTILE = {
    "to": "<script>alert('pwned')</script><img src=x onerror=alert(1)>",
    "memo": "invoice \u202egnp.exe and a zero\u200bwidth \u2066isolate\u2069 \ufeffBOM",
    "quote": "\"'></pre><b>bold</b>{{ 7*7 }}",
    "cents": 5,
}


class Bank:
    def __init__(self, *, lands_then_raises: bool = False) -> None:
        self.paid: list[dict[str, Any]] = []
        self.answer = "unknown"
        self.lands_then_raises = lands_then_raises

    def pay(self, to: str, cents: int, memo: str = "", quote: str = "") -> str:
        self.paid.append({"to": to, "cents": cents})
        if self.lands_then_raises:
            raise RuntimeError("landed, then the client failed to read the answer")
        return f"paid {cents}"

    def lookup(self, to: str, cents: int, memo: str = "", quote: str = "") -> Any:
        if self.answer == "unknown":
            raise ConnectionError("status API down")
        return f"paid {cents}" if self.answer == "done" else None

    def registry(self) -> ToolRegistry:
        registry = ToolRegistry()
        registry.register(ToolSpec("pay", "Pay an invoice <b>now</b>", "irreversible_write", 5, 1,
                                   500, self.pay, status_lookup=self.lookup,
                                   max_argument_chars=2_000_000))
        return registry


class Desk:
    """A store, the model's runner that asks, and the desk's app on the same store."""

    def __init__(self, tmp_path: Path, **options: Any) -> None:
        self.bank = Bank(lands_then_raises=options.pop("lands_then_raises", False))
        self.store = SQLiteIdempotencyStore(tmp_path / "desk.sqlite3")
        self.model = ToolRunner(self.bank.registry(), store=self.store)
        registry = options.pop("registry") if "registry" in options else self.bank.registry()
        self.runner = ToolRunner(registry, store=self.store)
        self.app = create_app(self.runner, token=TOKEN, allowed_hosts=loopback_hosts("127.0.0.1", 8765),
                              **options)

    def ask(self, arguments: dict[str, Any] | None = None) -> str:
        result = self.model.call("pay", arguments or {"to": "ana", "cents": 5})
        assert result["error"] == "approval_required"
        return str(result["approval_id"])

    def client(self) -> TestClient:
        return TestClient(self.app, base_url=BASE)

    def login(self, name: str = "alice") -> TestClient:
        client = self.client()
        answer = client.post("/login", data={"token": TOKEN, "name": name}, follow_redirects=False)
        assert answer.status_code == 303
        return client

    def state(self, approval_id: str) -> str:
        return str(self.runner.approvals.get(approval_id)["state"])

    def audit(self) -> list[dict[str, Any]]:
        return [json.loads(text) for text in self.store.audit_entries()]


@pytest.fixture
def desk(tmp_path: Path) -> Any:
    made = Desk(tmp_path)
    yield made
    made.store.close()


def csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None
    return found.group(1)


def messages(page: str) -> list[str]:
    return re.findall(r'<p class="message [a-z]+" role="status">([^<]*)</p>', page)


def decide(client: TestClient, approval_id: str, action: str) -> str:
    page = client.get("/").text
    answer = client.post("/decide", data={"approval_id": approval_id, "action": action,
                                          "csrf": csrf(page)})
    assert answer.status_code == 200
    return answer.text


# ---------------------------------------------------------------- nothing without the token


def test_without_the_token_nothing_is_shown_or_decided(desk: Desk) -> None:
    approval_id = desk.ask(HOSTILE)
    client = desk.client()
    for path in ("/", "/state", "/?token=" + TOKEN):
        answer = client.get(path)
        assert answer.status_code == 403
        assert approval_id not in answer.text and "pwned" not in answer.text
    assert client.get("/login?token=wrong" + TOKEN).status_code == 403
    assert client.get("/login").status_code == 403
    bad = client.post("/login", data={"token": TOKEN[:-1], "name": "eve"}, follow_redirects=False)
    assert bad.status_code == 403 and "set-cookie" not in bad.headers
    forged = client.post("/decide", data={"approval_id": approval_id, "action": "approve"})
    assert forged.status_code == 403
    assert desk.bank.paid == [] and desk.state(approval_id) == "pending" and desk.audit() == []


def test_login_gives_an_httponly_samesite_strict_session(desk: Desk) -> None:
    client = desk.client()
    form = client.get(f"/login?token={TOKEN}")
    assert form.status_code == 200 and 'name="name"' in form.text
    answer = client.post("/login", data={"token": TOKEN, "name": "alice"}, follow_redirects=False)
    cookie = answer.headers["set-cookie"]
    assert answer.status_code == 303 and answer.headers["location"] == "/"
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert TOKEN not in cookie
    page = client.get("/")
    assert page.status_code == 200 and "deciding as <strong>alice</strong>" in page.text


@pytest.mark.parametrize("name", ["", " alice", "al\u202eice", "zero\u200bwidth", "x" * 81])
def test_a_misleading_name_is_refused_at_login(desk: Desk, name: str) -> None:
    client = desk.client()
    answer = client.post("/login", data={"token": TOKEN, "name": name}, follow_redirects=False)
    assert answer.status_code == 400 and "set-cookie" not in answer.headers


def test_with_one_approver_the_url_logs_in_at_once(tmp_path: Path) -> None:
    desk = Desk(tmp_path, approver="pat")
    approval_id = desk.ask()
    client = desk.client()
    answer = client.get(f"/login?token={TOKEN}", follow_redirects=False)
    assert answer.status_code == 303
    decide(client, approval_id, "approve")
    assert len(desk.bank.paid) == 1 and desk.audit()[0]["who"] == "pat"
    other = desk.client()  # a name given at login is not used: the desk has one approver
    other.post("/login", data={"token": TOKEN, "name": "eve"})
    assert "deciding as <strong>pat</strong>" in other.get("/").text


# ---------------------------------------------------------------- CSRF and headers


def test_a_forged_post_without_the_csrf_token_pays_nothing(desk: Desk) -> None:
    approval_id = desk.ask()
    client = desk.login()
    page = client.get("/").text
    for data in ({"approval_id": approval_id, "action": "approve"},
                 {"approval_id": approval_id, "action": "approve", "csrf": "guess"},
                 {"approval_id": approval_id, "action": "approve", "csrf": ""}):
        assert client.post("/decide", data=data).status_code == 403
    token = csrf(page)
    cross = client.post("/decide", data={"approval_id": approval_id, "action": "approve",
                                         "csrf": token}, headers={"sec-fetch-site": "cross-site"})
    assert cross.status_code == 403
    origin = client.post("/decide", data={"approval_id": approval_id, "action": "approve",
                                          "csrf": token}, headers={"origin": "http://evil.test"})
    assert origin.status_code == 403
    other = desk.login("bob")  # another person's session with this person's token: refused
    assert other.post("/decide", data={"approval_id": approval_id, "action": "approve",
                                       "csrf": token}).status_code == 403
    assert client.post("/logout", data={}).status_code == 403  # logging out needs it too
    assert desk.bank.paid == [] and desk.state(approval_id) == "pending" and desk.audit() == []
    decide(client, approval_id, "approve")
    assert len(desk.bank.paid) == 1


def test_every_response_has_the_headers_and_no_inline_script(desk: Desk) -> None:
    desk.ask(HOSTILE)
    client = desk.login()
    for answer in (client.get("/"), client.get("/static/desk.css"), desk.client().get("/"),
                   client.get("/login?token=" + TOKEN)):
        assert answer.headers["content-security-policy"] == CSP
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["referrer-policy"] == "same-origin"
        assert answer.headers["cache-control"] == "no-store"
    assert "'unsafe-inline'" not in CSP and "script-src 'self'" in CSP
    page = client.get("/").text
    scripts = re.findall(r"<script\b[^>]*>", page)
    assert scripts == ['<script src="/static/desk.js" defer>']
    assert " on" not in re.sub(r'"[^"]*"', '""', " ".join(re.findall(r"<[a-z][^>]*>", page)))


def test_a_host_that_is_not_the_loopback_is_refused(desk: Desk) -> None:
    client = TestClient(desk.app, base_url="http://attacker.example:8765")
    assert client.get(f"/login?token={TOKEN}").status_code == 400


# ---------------------------------------------------------------- what the page shows


def test_hostile_arguments_are_shown_whole_and_inert(desk: Desk) -> None:
    arguments = {**HOSTILE, "memo": HOSTILE["memo"] + " " + "A" * (1024 * 1024)}
    approval_id = desk.ask(arguments)
    page = desk.login().get("/").text
    assert "<script>alert" not in page and "<img src=x" not in page and "<b>bold</b>" not in page
    assert "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;" in page
    assert "\u202e" not in page and "\u200b" not in page and "\ufeff" not in page
    assert "\\u202egnp.exe" in page and "zero\\u200bwidth" in page and "\\u2066isolate\\u2069" in page
    assert "{{ 7*7 }}" in page and "49" not in re.sub(r"\d{3,}", "", page.split("Arguments")[1][:400])
    assert page.count("A" * (1024 * 1024)) == 1  # whole, once (under its expandable preview)
    assert "<details class=\"whole\">" in page
    assert "Pay an invoice &lt;b&gt;now&lt;/b&gt;" in page  # even the registry's text is text
    assert approval_id in page
    assert desk.bank.paid == []


def test_each_approval_shows_its_evidence(desk: Desk) -> None:
    approval_id = desk.ask({"to": "ana", "cents": 5})
    record = desk.runner.approvals.get(approval_id)
    page = desk.login().get("/").text
    from agentkit.policy.stores.audit import arguments_digest

    for fact in ("pay", "irreversible write", record["key"], "task <code>default</code>",
                 arguments_digest(record["arguments"]), "no attempt yet",
                 "Time left", "59 min", "not limited"):
        assert fact in page, fact


def test_the_state_version_changes_when_someone_decides(desk: Desk) -> None:
    approval_id = desk.ask()
    client = desk.login()
    before = client.get("/state").json()["version"]
    assert client.get("/state").json()["version"] == before
    desk.runner.deny(approval_id, approver="cli-user")  # another channel decides
    assert client.get("/state").json()["version"] != before


# ---------------------------------------------------------------- the CLI's decisions


def test_approve_and_deny_record_the_person_and_pay_once(desk: Desk) -> None:
    paid_id, denied_id = desk.ask(), desk.ask({"to": "bob", "cents": 9})
    client = desk.login("alice")
    told = messages(decide(client, paid_id, "approve"))
    assert told == [f"{paid_id}: approved by alice; it ran once, ok (1 attempt)"]
    told = messages(decide(client, denied_id, "deny"))
    assert told == [f"{denied_id}: denied by alice; nothing ran"]
    again = messages(decide(client, paid_id, "approve"))
    assert "nothing ran now" in again[0]
    contradiction = messages(decide(client, paid_id, "deny"))
    assert "already approved at" in contradiction[0] and "would contradict it" in contradiction[0]
    assert desk.bank.paid == [{"to": "ana", "cents": 5}]
    assert [(e["action"], e["who"]) for e in desk.audit()] == [("approve", "alice"),
                                                                ("deny", "alice")]
    lines = list(export_lines(desk.store.audit_entries(), 0.0, None))
    assert verify_lines(lines) == 2


def test_a_decision_the_cli_took_first_is_told(desk: Desk) -> None:
    approval_id = desk.ask()
    client = desk.login("alice")
    page = client.get("/").text
    desk.runner.deny(approval_id, approver="bob")  # at the terminal, meanwhile
    answer = client.post("/decide", data={"approval_id": approval_id, "action": "approve",
                                          "csrf": csrf(page)})
    assert "already denied at" in messages(answer.text)[0]
    assert desk.bank.paid == []


def test_four_eyes_needs_two_people_on_the_desk(tmp_path: Path) -> None:
    desk = Desk(tmp_path, four_eyes=["pay"])
    approval_id = desk.ask()
    alice, bob = desk.login("alice"), desk.login("bob")
    page = alice.get("/").text
    assert "2 different people must approve" in page
    told = messages(decide(alice, approval_id, "approve"))
    assert "approval by alice counted (1 of 2: alice)" in told[0]
    told = messages(decide(alice, approval_id, "approve"))
    assert "alice approved it already (one person approving twice counts once)" in told[0]
    assert desk.bank.paid == [] and desk.state(approval_id) == "pending"
    told = messages(decide(bob, approval_id, "approve"))
    assert told == [f"{approval_id}: approved by bob; it ran once, ok (1 attempt)"]
    assert len(desk.bank.paid) == 1
    assert [(e["action"], e["who"]) for e in desk.audit()] == [("sign_off", "alice"),
                                                                ("approve", "bob")]
    # the store remembers: the CLI (no four-eyes setting) counts sign-offs on a marked record
    other = desk.ask({"to": "carl", "cents": 1})
    desk.login("x").get("/")  # the desk marked it as it showed it
    assert desk.runner.approve(other, approver="cli")["error"] == "approval_required"
    assert len(desk.bank.paid) == 1


def test_a_tool_this_desk_cannot_run_stays_pending(tmp_path: Path) -> None:
    desk = Desk(tmp_path, registry=ToolRegistry())
    approval_id = desk.ask()
    client = desk.login()
    page = client.get("/").text
    assert "not in the loaded registry" in page and "disabled" in page
    told = messages(decide(client, approval_id, "approve"))
    assert "pay is not in the loaded registry" in told[0]
    assert desk.state(approval_id) == "pending" and desk.bank.paid == []


def test_a_workflows_approval_goes_to_its_workflow(desk: Desk) -> None:
    approval_id = desk.ask()
    record = desk.runner.approvals.get(approval_id)
    desk.store.update_approval(approval_id, "pending",
                               {**record, "workflow": {"engine": "dbos", "id": "wf-1"}})
    told = messages(decide(desk.login(), approval_id, "approve"))
    assert "belongs to DBOS workflow wf-1" in told[0]
    assert desk.state(approval_id) == "pending" and desk.bank.paid == []


# ---------------------------------------------------------------- calls in doubt


def test_a_call_in_doubt_is_listed_and_its_lookup_asked_again(tmp_path: Path) -> None:
    desk = Desk(tmp_path, lands_then_raises=True)
    approval_id = desk.ask()
    assert desk.runner.approve(approval_id, approver="alice")["error"] == "outcome_unknown"
    client = desk.login("ops")
    page = client.get("/").text
    assert "Calls in doubt <span class=\"count\">1</span>" in page
    assert "Ask the lookup again" in page
    answer = client.post("/recheck", data={"approval_id": approval_id, "csrf": csrf(page)})
    assert "still cannot say" in messages(answer.text)[0]
    desk.bank.answer = "done"
    answer = client.post("/recheck", data={"approval_id": approval_id, "csrf": csrf(page)})
    assert "says it was done" in messages(answer.text)[0]
    assert "Calls in doubt <span class=\"count\">0</span>" in answer.text
    assert len(desk.bank.paid) == 1
    assert [(e["action"], e["who"]) for e in desk.audit()][-1] == ("lookup", "ops")


def test_a_call_in_doubt_is_released_only_with_a_note(tmp_path: Path) -> None:
    desk = Desk(tmp_path, lands_then_raises=True)
    approval_id = desk.ask()
    desk.runner.approve(approval_id, approver="alice")
    key = desk.runner.approvals.get(approval_id)["key"]
    client = desk.login("ops")
    page = client.get("/").text
    answer = client.post("/release", data={"key": key, "note": "  ", "csrf": csrf(page)})
    assert "write a note" in messages(answer.text)[0]
    assert desk.store.key_entry(key) is not None
    assert client.post("/release", data={"key": key, "note": "checked"}).status_code == 403
    answer = client.post("/release", data={"key": key, "note": "bank says: not paid",
                                           "csrf": csrf(page)})
    assert "released the stale claim" in messages(answer.text)[0]
    assert desk.store.key_entry(key) is None
    entry = desk.audit()[-1]
    assert (entry["action"], entry["who"], entry["note"]) == ("release", "ops", "bank says: not paid")
    answer = client.post("/release", data={"key": key, "note": "again", "csrf": csrf(page)})
    assert "no such key" in messages(answer.text)[0]
    assert len(desk.bank.paid) == 1


def test_a_live_claim_is_not_released(desk: Desk) -> None:
    claimed = desk.store.claim("busy-key", None, 300, may_take_over=False)
    assert isinstance(claimed, tuple)
    client = desk.login("ops")
    page = client.get("/").text
    assert "Calls in doubt <span class=\"count\">0</span>" in page
    answer = client.post("/release", data={"key": "busy-key", "note": "x", "csrf": csrf(page)})
    assert "its claim is live" in messages(answer.text)[0]
    assert desk.store.key_entry("busy-key") is not None


def test_logging_out_ends_the_session(desk: Desk) -> None:
    client = desk.login()
    page = client.get("/").text
    assert client.post("/logout", data={"csrf": csrf(page)}).status_code == 200
    assert client.get("/").status_code == 403


def test_require_marks_only_the_four_eyes_tools(desk: Desk) -> None:
    approval_id = desk.ask()
    desk.login().get("/")
    assert "approvers_needed" not in desk.runner.approvals.get(approval_id)
    record = run_store_steps(desk.store, desk.runner.approvals.require(approval_id, 2))
    assert record is not None and record["approvers_needed"] == 2
