"""The approvals desk in a real Chromium (docs/design.md#approvals-desk): log in, approve,
deny, four eyes, one approval raced from two browsers and the CLI, a deny racing an approve,
hostile arguments inert, no token, a forged cross-site POST, an edited audit line — every
test counting the real payments in a ledger that every process writes. Screenshots of the
page at a laptop's width (1280 px) and a phone's (390 px) go to test-artifacts/desk/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
FACES = ROOT / "tests" / "faces"
ARTIFACTS = ROOT / "test-artifacts" / "desk"
sys.path.insert(0, str(FACES))
import _desk_ledger

from agentkit import ToolRunner
from agentkit.policy.stores import SQLiteIdempotencyStore

WAIT_MS = 20_000


class DeskServer:
    """``python -m agentkit desk`` on a fresh store, the model's runner that asks, and the
    ledger of real payments."""

    def __init__(self, tmp_path: Path, *args: str, pay_seconds: float = 0.0) -> None:
        self.store_path = tmp_path / "desk.sqlite3"
        self.env = {**os.environ, "DESK_LEDGER": str(tmp_path / "ledger.jsonl"),
                    "DESK_PAY_SECONDS": str(pay_seconds),
                    "PYTHONPATH": os.pathsep.join([str(FACES), os.environ.get("PYTHONPATH", "")])}
        os.environ["DESK_LEDGER"] = self.env["DESK_LEDGER"]
        self.store = SQLiteIdempotencyStore(self.store_path)
        self.model = ToolRunner(_desk_ledger.registry(), store=self.store)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "agentkit", "desk", "--store", str(self.store_path), "--port",
             "0", "--registry", "_desk_ledger:registry", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.env)
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        assert "/login?token=" in self.url, self.process.stderr.read() if self.process.stderr else ""
        self.base = self.url.split("/login")[0]

    def ask(self, **arguments: Any) -> str:
        result = self.model.call("pay", arguments or {"to": "ana", "cents": 5})
        assert result["error"] == "approval_required", result
        return str(result["approval_id"])

    def paid(self) -> list[dict[str, Any]]:
        return _desk_ledger.payments()

    def cli(self, *argv: str) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, "-m", "agentkit", *argv],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=self.env)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        self.store.close()


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[DeskServer]:
    server = DeskServer(tmp_path)
    yield server
    server.stop()


def person(browser: Any, desk: DeskServer, name: str, width: int = 1280) -> Any:
    """A browser context of its own (its own cookies), logged in as ``name``."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.dialogs = dialogs
    page.goto(desk.url)
    page.fill("#name", name)
    page.click("button[type=submit]")
    page.wait_for_selector(f"text=deciding as {name}")
    return page


def card(page: Any, approval_id: str) -> Any:
    return page.locator(f"article.approval[data-approval='{approval_id}']")


def told(page: Any) -> str:
    page.wait_for_selector("p.message")
    return " ".join(page.locator("p.message").all_inner_texts())


def test_log_in_approve_and_deny(browser: Any, desk: DeskServer) -> None:
    paid_id, denied_id = desk.ask(to="ana", cents=5), desk.ask(to="bob", cents=7)
    page = person(browser, desk, "alice")
    assert card(page, paid_id).count() == 1 and card(page, denied_id).count() == 1
    card(page, paid_id).locator("button.approve").click()
    assert f"{paid_id}: approved by alice; it ran once, ok" in told(page)
    assert card(page, paid_id).count() == 0
    card(page, denied_id).locator("button.deny").click()
    assert f"{denied_id}: denied by alice; nothing ran" in told(page)
    assert page.locator("text=Nothing waits for a decision.").count() == 1
    assert [(p["to"], p["cents"]) for p in desk.paid()] == [("ana", 5)]
    assert page.dialogs == []


def test_four_eyes_in_two_browsers(browser: Any, tmp_path: Path) -> None:
    desk = DeskServer(tmp_path, "--four-eyes", "pay")
    try:
        approval_id = desk.ask()
        alice, bob = person(browser, desk, "alice"), person(browser, desk, "bob")
        assert "2 different people must approve" in card(alice, approval_id).inner_text()
        card(alice, approval_id).locator("button.approve").click()
        assert "approval by alice counted (1 of 2: alice)" in told(alice)
        card(alice, approval_id).locator("button.approve").click()
        assert "counts once" in told(alice)
        assert desk.paid() == []
        bob.reload()  # (its script would reload it too)
        card(bob, approval_id).locator("button.approve").click()
        assert f"{approval_id}: approved by bob; it ran once, ok" in told(bob)
        assert len(desk.paid()) == 1
        alice.wait_for_selector("text=Nothing waits for a decision.")  # the poll reloaded it
    finally:
        desk.stop()


def test_one_approval_raced_from_two_browsers_and_the_cli_pays_once(
        browser: Any, tmp_path: Path) -> None:
    desk = DeskServer(tmp_path, pay_seconds=1.5)  # a slow bank: the three meet mid-payment
    try:
        approval_id = desk.ask()
        alice, bob = person(browser, desk, "alice"), person(browser, desk, "bob")
        cli = desk.cli("approvals", "approve", approval_id, "--store", str(desk.store_path),
                       "--registry", "_desk_ledger:registry", "--approver", "carol")
        time.sleep(0.3)  # (not synchronisation: the assertions hold in any order)
        for page in (alice, bob):
            card(page, approval_id).locator("button.approve").click(no_wait_after=True)
        out, err = cli.communicate(timeout=60)
        texts = [told(alice), told(bob)]
        assert len(desk.paid()) == 1, (texts, out, err)
        printed = json.loads(out.splitlines()[0]) if out.strip() else {}
        cli_won = printed.get("ok") is True and printed.get("replayed") is False
        winners = [t for t in texts if "it ran once, ok" in t] + (["cli"] if cli_won else [])
        assert len(winners) == 1, (texts, out, err)
        others = " ".join(texts) + err
        assert "already approved" in others or "under way" in others or "nothing ran now" in others
        record = desk.model.approvals.get(approval_id)
        assert record["state"] == "settled" and record["decided_by"] in ("alice", "bob", "carol")
    finally:
        desk.stop()


def test_a_deny_racing_an_approve_has_one_winner(browser: Any, tmp_path: Path) -> None:
    desk = DeskServer(tmp_path, pay_seconds=0.5)
    try:
        approval_id = desk.ask()
        alice, bob = person(browser, desk, "alice"), person(browser, desk, "bob")
        card(alice, approval_id).locator("button.approve").click(no_wait_after=True)
        card(bob, approval_id).locator("button.deny").click(no_wait_after=True)
        texts = told(alice) + " " + told(bob)
        record = desk.model.approvals.get(approval_id)
        if record["decision"] == "approved":
            assert len(desk.paid()) == 1 and "would contradict it" in texts
        else:
            assert desk.paid() == [] and "denied by bob" in texts
            assert "already denied" in texts
    finally:
        desk.stop()


HOSTILE_TO = "<script>alert('pwned')</script><img src=x onerror=alert(1)>"
HOSTILE_MEMO = "invoice \u202egnp.exe zero\u200bwidth " + "A" * (1024 * 1024)


def test_hostile_arguments_are_shown_inert(browser: Any, desk: DeskServer) -> None:
    approval_id = desk.ask(to=HOSTILE_TO, cents=5, memo=HOSTILE_MEMO)
    page = person(browser, desk, "alice")
    item = card(page, approval_id)
    assert page.locator("img[src=x]").count() == 0
    assert page.evaluate("document.scripts.length") == 1  # the desk's own, nothing else
    preview = item.locator("pre.args").first.inner_text()
    assert "\\u202egnp.exe" in preview and "zero\\u200bwidth" in preview
    assert "\u202e" not in preview and "\u200b" not in preview
    item.locator("details.whole summary").click()
    whole = item.locator("details.whole pre.args").inner_text()
    assert "<script>alert('pwned')</script><img src=x" in whole  # as text, never as markup
    assert whole.count("A" * 1000) >= 1000 and len(whole) > 1024 * 1024
    page.screenshot(path=str(ARTIFACTS / "hostile.png"))
    assert page.dialogs == [] and desk.paid() == []


def test_no_token_shows_nothing_and_a_forged_post_pays_nothing(
        browser: Any, desk: DeskServer) -> None:
    approval_id = desk.ask()
    context = browser.new_context()
    page = context.new_page()
    answer = page.goto(desk.base + "/")
    assert answer.status == 403 and approval_id not in page.content()
    assert page.goto(desk.base + "/login?token=wrong-token-xxxxxxxx").status == 403
    victim = person(browser, desk, "alice")  # logged in, in the same browser as the attacker
    attacker = victim.context.new_page()
    attacker.set_content(
        f'<form id="f" method="post" action="{desk.base}/decide">'
        f'<input name="approval_id" value="{approval_id}"><input name="action" value="approve">'
        '<input name="csrf" value="guess"></form>')
    with attacker.expect_navigation():
        attacker.evaluate("document.getElementById('f').submit()")
    assert "Not logged in" in attacker.content()
    assert desk.paid() == []
    assert desk.model.approvals.get(approval_id)["state"] == "pending"
    context.close()


def test_an_edited_audit_line_fails_verify_with_its_number(
        browser: Any, desk: DeskServer, tmp_path: Path) -> None:
    first, second = desk.ask(to="ana", cents=5), desk.ask(to="bob", cents=6)
    page = person(browser, desk, "alice")
    card(page, first).locator("button.approve").click()
    told(page)
    card(page, second).locator("button.deny").click()
    told(page)
    assert "Audit log: 2 entries" in page.locator("footer.audit").inner_text()
    out = tmp_path / "audit.jsonl"
    done = desk.cli("audit", "export", "--store", str(desk.store_path), "--out", str(out))
    assert done.wait(60) == 0
    check = desk.cli("audit", "verify", str(out))
    assert check.wait(60) == 0
    lines = out.read_text().splitlines()
    out.write_text("\n".join([lines[0], lines[1].replace('"alice"', '"mallory"'), lines[2]]) + "\n")
    check = desk.cli("audit", "verify", str(out))
    _, err = check.communicate(timeout=60)
    assert check.returncode == 1 and ": entry 2: changed" in err and err.count("\n") == 1
    assert len(desk.paid()) == 1


@pytest.mark.parametrize("width", [1280, 390])
def test_the_page_at_a_laptops_and_a_phones_width(browser: Any, tmp_path: Path, width: int) -> None:
    desk = DeskServer(tmp_path, "--four-eyes", "pay")
    try:
        desk.ask(to="ACME Supplies Ltd", cents=129_900, memo="Invoice 2024-117, net 30")
        desk.model.call("refund", {"order": "A-1001"})
        page = person(browser, desk, "alice", width=width)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"desk-{width}.png"), full_page=True)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"the page scrolls sideways by {overflow} px at {width} px"
        for button in page.locator("button.approve, button.deny").all():
            box = button.bounding_box()
            assert box is not None and box["height"] >= 36 and box["x"] + box["width"] <= width
        assert desk.paid() == []
    finally:
        desk.stop()
