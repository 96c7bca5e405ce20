"""audit(): the failure matrix as a harness for any ToolSpec. A right tool passes every row; each
classic mistake fails exactly the rows it should, with the handler's real call count and why."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from agentkit import Effect, ToolSpec
from agentkit.demo import audit
from agentkit.demo.harness import (
    AUDIT_COLUMNS,
    CONTENT_ADDRESSED,
    DESIGNS,
    ID_ADDRESSED,
    UNSTABLE,
    audit_records,
    key_design,
)
from agentkit.demo.matrix import load_matrix


class Notes:
    """A learner's write tool: save a note under an id (overwrite); lookup and key beside it."""

    def __init__(self) -> None:
        self.saved: dict[str, str] = {}
        self.writes = 0

    def save_note(self, note_id: str, text: str) -> dict:
        """Save a note."""
        self.saved[note_id] = text
        self.writes += 1
        return {"note_id": note_id, "chars": len(text)}

    def status(self, note_id: str, text: str) -> dict | None:
        if self.saved.get(note_id) != text:
            return None
        return {"note_id": note_id, "chars": len(text)}

    def reset(self) -> None:
        self.saved.clear()

    def spec(self, **changes) -> ToolSpec:
        spec = ToolSpec(
            "save_note", "Save a note under an id.", Effect.REVERSIBLE_WRITE, 2.0, 3, 300,
            self.save_note, required_scopes={"notes:write"}, status_lookup=self.status,
            idempotency_key=lambda context, a: f"{context.task_id}:save_note:{a['note_id']}",
        )
        return dataclasses.replace(spec, **changes)


ARGS = {"note_id": "n-1", "text": "Meeting moved to 3pm."}
OTHER = {"note_id": "n-1", "text": "Meeting cancelled."}


def failing(frame) -> dict[str, tuple[str, int]]:
    bad = frame[~frame["pass"]]
    return {row.failure: (row.observed, row.handler_calls) for row in bad.itertuples()}


def test_a_right_write_tool_passes_every_row_of_its_level():
    notes = Notes()
    frame = audit(notes.spec(), ARGS, OTHER, reset=notes.reset)
    assert list(frame.columns) == AUDIT_COLUMNS
    expected = [r["failure"] for r in load_matrix() if r["effect"] == "reversible_write"]
    assert frame["failure"].tolist() == expected + ["disconnect_before_write"]
    assert frame["pass"].all(), frame
    assert (frame["handler_calls"] == frame["expected_calls"]).all()
    assert set(frame["why"]) == {""}
    assert frame.set_index("failure").loc["transient_disconnect", "attempts"] == 1


def test_a_write_without_status_lookup_fails_every_doubt_row():
    notes = Notes()
    frame = audit(notes.spec(status_lookup=None), ARGS, OTHER, reset=notes.reset)
    assert failing(frame) == {
        "transient_disconnect": ("outcome_unknown", 1),
        "timeout_outcome_unknown": ("outcome_unknown", 1),
        "process_killed_mid_write": ("outcome_unknown", 1),  # the dead process's write only
        "disconnect_before_write": ("outcome_unknown", 1),
    }
    why = frame.set_index("failure")["why"]
    assert why["transient_disconnect"].startswith("no status lookup")


def test_a_lookup_that_only_checks_the_id_fails_the_lost_request_row():
    notes = Notes()
    frame = audit(notes.spec(status_lookup=lambda note_id, text: (
        {"note_id": note_id, "chars": len(text)} if note_id in notes.saved else None)),
        ARGS, OTHER, reset=notes.reset)
    assert failing(frame) == {"disconnect_before_write": ("ok", 1)}
    assert notes.saved["n-1"] == OTHER["text"]  # the model was told "saved"; it was not
    assert "only check that the id exists" in frame.set_index("failure")["why"]["disconnect_before_write"]


def test_a_key_that_changes_on_every_call_writes_twice():
    notes = Notes()
    counter = itertools.count()
    frame = audit(notes.spec(idempotency_key=lambda context, a: f"note-{next(counter)}"),
                  ARGS, OTHER, reset=notes.reset)
    bad = failing(frame)
    assert bad["same_write_repeated"] == ("ok", 2)
    assert "key changed" in frame.set_index("failure")["why"]["same_write_repeated"]


def test_an_id_addressed_key_is_graded_by_the_conflict_rule():
    notes = Notes()
    frame = audit(notes.spec(), ARGS, OTHER, reset=notes.reset)
    assert frame.attrs["key_design"] == ID_ADDRESSED
    row = frame.set_index("failure").loc["same_key_other_payload"]
    assert (row["expected"], row["observed"], row["handler_calls"]) == ("idempotency_conflict",) * 2 + (1,)


def test_a_content_addressed_key_runs_another_payload_as_a_new_intent():
    notes = Notes()
    frame = audit(notes.spec(idempotency_key=None), ARGS, OTHER, reset=notes.reset)  # default key
    assert frame.attrs["key_design"] == CONTENT_ADDRESSED
    assert frame["pass"].all(), frame
    row = frame.set_index("failure").loc["same_key_other_payload"]
    assert (row["expected"], row["observed"], row["handler_calls"], row["expected_calls"]) == ("ok", "ok", 2, 2)
    assert notes.writes >= 2 + 2  # that row's two payloads, then the lost request's rewrite


def test_key_design_names_each_design():
    notes = Notes()
    counter = itertools.count()
    assert key_design(notes.spec(), ARGS, OTHER) == ID_ADDRESSED
    assert key_design(notes.spec(idempotency_key=None), ARGS, OTHER) == CONTENT_ADDRESSED
    assert key_design(notes.spec(idempotency_key=lambda c, a: f"{c.task_id}:{a['note_id']}:{a['text']}"),
                      ARGS, OTHER) == CONTENT_ADDRESSED
    assert key_design(notes.spec(idempotency_key=lambda c, a: f"n-{next(counter)}"), ARGS, OTHER) == UNSTABLE
    assert set(DESIGNS) == {CONTENT_ADDRESSED, ID_ADDRESSED, UNSTABLE}


def test_an_unstable_key_is_graded_by_the_conflict_rule_and_says_why():
    notes = Notes()
    counter = itertools.count()
    frame = audit(notes.spec(idempotency_key=lambda c, a: f"n-{next(counter)}"), ARGS, OTHER,
                  reset=notes.reset)
    assert frame.attrs["key_design"] == UNSTABLE
    row = frame.set_index("failure").loc["same_key_other_payload"]
    assert (row["observed"], row["handler_calls"], bool(row["pass"])) == ("ok", 2, False)
    assert "key changed" in row["why"]


def test_the_demo_save_brief_passes_its_audit_behind_its_workspace_policy(tmp_path):
    import shutil

    from agentkit.demo import make_demo_registry

    workspace = tmp_path / "ws"
    registry = make_demo_registry(workspace)
    brief = registry.get("save_brief")
    args = {"path": "briefs/a.md", "content": "# A\n"}
    calls = []
    spec = dataclasses.replace(brief, handler=lambda path, content: calls.append(path) or brief.handler(path, content))

    def reset():
        shutil.rmtree(workspace / "briefs", ignore_errors=True)

    frame = audit(spec, args, {**args, "content": "# B\n"}, reset=reset,
                  policies=registry.policies, forbidden_arguments={**args, "path": "../escape.md"})
    assert frame.attrs["key_design"] == CONTENT_ADDRESSED
    assert frame["pass"].all(), frame
    rows = frame.set_index("failure")
    assert (rows.loc["authorization_denial", "observed"], rows.loc["authorization_denial", "handler_calls"]) == ("forbidden", 0)
    assert not (tmp_path / "escape.md").exists()
    assert int(frame["handler_calls"].sum()) >= len(calls) > 0
    # without the policy, nothing stops a caller granted nothing: the row says how to fix it
    bare = audit(spec, args, {**args, "content": "# B\n"}, reset=reset)
    assert failing(bare) == {"authorization_denial": ("ok", 1)}
    assert "policies=" in bare.set_index("failure")["why"]["authorization_denial"]


def test_a_tool_anyone_may_call_fails_the_authorization_row():
    notes = Notes()
    frame = audit(notes.spec(required_scopes=frozenset()), ARGS, OTHER, reset=notes.reset)
    assert failing(frame) == {"authorization_denial": ("ok", 1)}


def test_a_handler_that_raises_is_a_row_not_an_exception():
    def broken(note_id: str, text: str) -> dict:
        """Save a note."""
        raise RuntimeError("disk full")

    frame = audit(Notes().spec(handler=broken), ARGS, OTHER)
    assert not frame["pass"].all()
    assert frame.set_index("failure")["observed"]["same_write_repeated"] == "tool_failure"


def test_reads_and_irreversible_writes_are_audited_at_their_level():
    def lookup(city: str) -> str:
        """Weather for a city."""
        return f"{city}: sunny"

    read = ToolSpec("weather", "Weather for a city.", Effect.READ, 2.0, 3, 300, lookup,
                    required_scopes={"weather:read"})
    frame = audit(read, {"city": "Oslo"})
    assert frame["pass"].all(), frame
    assert frame["failure"].tolist() == [r["failure"] for r in load_matrix() if r["effect"] == "read"]
    assert frame.set_index("failure")["handler_calls"]["transient_disconnect"] == 3

    sent: list[str] = []

    def send_sms(sms_id: str, to: str, text: str) -> dict:
        """Send a text message."""
        sent.append(sms_id)
        return {"sms_id": sms_id, "status": "sent"}

    sms = ToolSpec("send_sms", "Send a text message.", Effect.IRREVERSIBLE_WRITE, 2.0, 1, 300,
                   send_sms, required_scopes={"sms:send"},
                   idempotency_key=lambda context, a: f"sms:{a['sms_id']}")
    frame = audit(sms, {"sms_id": "s-1", "to": "+4700000000", "text": "hi"},
                  {"sms_id": "s-1", "to": "+4700000000", "text": "other"})
    assert frame["pass"].all(), frame
    assert int(frame["handler_calls"].sum()) == len(sent)


def test_audit_refuses_what_it_cannot_play():
    with pytest.raises(TypeError):
        audit_records("save_note", ARGS)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="other_arguments"):
        audit_records(Notes().spec(), ARGS)


def test_the_disk_ledger_writes_with_the_one_atomic_write(monkeypatch, tmp_path):
    from agentkit.demo import scenarios

    written = []
    real = scenarios.atomic_write_text
    monkeypatch.setattr(scenarios, "atomic_write_text", lambda path, text: written.append(path) or real(path, text))
    ledger = scenarios.DiskLedger(tmp_path)
    ledger.put("draft-7", "hello")
    assert written == [tmp_path / "draft-7.json"] and ledger.get("draft-7") == "hello"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["draft-7.json", "writes.log"]  # no temp file left


class Payments:
    """A payment API the learner wraps: payments by id, and a truthful status lookup."""

    def __init__(self) -> None:
        self.paid: dict[str, dict] = {}
        self.calls = 0

    def send(self, payment_id: str, to: str, cents: int) -> dict:
        """Send a payment."""
        self.calls += 1
        self.paid[payment_id] = {"to": to, "cents": cents}
        return {"payment_id": payment_id, "status": "sent"}

    def status(self, payment_id: str, to: str, cents: int) -> dict | None:
        if self.paid.get(payment_id) != {"to": to, "cents": cents}:
            return None
        return {"payment_id": payment_id, "status": "sent"}

    def spec(self, **changes) -> ToolSpec:
        spec = ToolSpec("send_payment", "Send a payment.", Effect.IRREVERSIBLE_WRITE, 2.0, 1, 300,
                        self.send, required_scopes={"payments:send"}, status_lookup=self.status,
                        idempotency_key=lambda context, a: f"{context.task_id}:pay:{a['payment_id']}")
        return dataclasses.replace(spec, **changes)


PAY = {"payment_id": "p-1", "to": "ada", "cents": 500}
PAY_OTHER = {"payment_id": "p-1", "to": "ada", "cents": 900}


def test_a_payment_whose_lookup_truthfully_settles_the_doubt_passes_those_rows():
    """The practice notebooks 04/05 teach: after a drop or a timeout the lookup finds the
    payment, and the model reads the receipt (ok, 1 payment). Before, those rows expected
    outcome_unknown and failed the tool for it."""
    payments = Payments()
    frame = audit(payments.spec(), PAY, PAY_OTHER, reset=payments.paid.clear)
    assert frame["pass"].all(), frame[~frame["pass"]]
    rows = frame.set_index("failure")
    for failure in ("transient_disconnect", "timeout_outcome_unknown"):
        assert (rows.loc[failure, "expected"], rows.loc[failure, "observed"],
                rows.loc[failure, "handler_calls"]) == ("ok", "ok", 1)
    # without a lookup the same rows expect outcome_unknown, and the tool passes them
    bare = audit(payments.spec(status_lookup=None), PAY, PAY_OTHER, reset=payments.paid.clear)
    assert bare["pass"].all(), bare[~bare["pass"]]
    assert bare.set_index("failure").loc["transient_disconnect", "observed"] == "outcome_unknown"


def test_a_lookup_that_misses_the_landed_payment_fails_those_rows():
    payments = Payments()
    frame = audit(payments.spec(status_lookup=lambda payment_id, to, cents: None), PAY, PAY_OTHER,
                  reset=payments.paid.clear)
    bad = failing(frame)
    assert bad["transient_disconnect"] == ("transient_failure", 1)  # "not done": a lie
    why = frame.set_index("failure")["why"]["transient_disconnect"]
    assert "status lookup" in why


def test_a_key_written_with_json_dumps_is_caught_by_the_other_order():
    """``json.dumps(arguments)`` without sort_keys: the same arguments in another order give
    another key, and the write runs twice. The audit sends them in another order."""
    import json

    notes = Notes()
    spec = notes.spec(idempotency_key=lambda context, a: f"{context.task_id}:{json.dumps(a)}")
    assert key_design(spec, ARGS, OTHER) == UNSTABLE
    frame = audit(spec, ARGS, OTHER, reset=notes.reset)
    assert frame.attrs["key_design"] == UNSTABLE
    bad = failing(frame)
    assert bad["same_write_repeated"] == ("ok", 2)
    assert "order" in frame.set_index("failure")["why"]["same_write_repeated"]
    # sort_keys=True is the fix: every row passes
    fixed = notes.spec(idempotency_key=lambda c, a: f"{c.task_id}:{json.dumps(a, sort_keys=True)}")
    assert key_design(fixed, ARGS, OTHER) == CONTENT_ADDRESSED
    assert audit(fixed, ARGS, OTHER, reset=notes.reset)["pass"].all()


class NoteKey:
    """A key object equal only to itself whose text names the note: the runner keys by
    ``str(key)``, so it is stable (and id-addressed), whatever ``==`` says."""

    def __init__(self, note_id: str) -> None:
        self.note_id = note_id

    def __str__(self) -> str:
        return f"note:{self.note_id}"


class ShiftyKey:
    """Equal by note id, but its text carries its own address: the runner sees a new key."""

    def __init__(self, note_id: str) -> None:
        self.note_id = note_id

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ShiftyKey) and other.note_id == self.note_id

    __hash__ = None  # type: ignore[assignment]

    def __str__(self) -> str:
        return f"note:{self.note_id}:{id(self)}"


def test_key_design_compares_keys_as_the_runner_does():
    notes = Notes()
    stable = notes.spec(idempotency_key=lambda c, a: NoteKey(a["note_id"]))
    assert key_design(stable, ARGS, OTHER) == ID_ADDRESSED  # == said unstable
    assert audit(stable, ARGS, OTHER, reset=notes.reset)["pass"].all()
    shifty = notes.spec(idempotency_key=lambda c, a: ShiftyKey(a["note_id"]))
    assert key_design(shifty, ARGS, OTHER) == UNSTABLE  # == said id-addressed
    assert failing(audit(shifty, ARGS, OTHER, reset=notes.reset))["same_write_repeated"] == ("ok", 2)
