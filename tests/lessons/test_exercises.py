"""The exercises of notebooks 06 and 07: every check against a right answer, wrong ones, the placeholder.

A check must judge behaviour (so two differently written right answers both pass), explain a
wrong answer by what it did, never raise, and print the same text on every run.
"""

from __future__ import annotations

import hashlib
import itertools

import pytest

from agentkit import invoke_tool
from agentkit.lessons.exercises import (
    EFFECT_CHOICES,
    TOOLS_TO_CLASSIFY,
    connect_report,
    q1,
    q2,
    q3,
    q4,
    q5,
    q6,
    q7,
    report_registry,
    save_draft,
)

EXERCISES = [q1, q2, q3, q4, q5, q6, q7]
ANSWER_NAMES = {1: "draft_status", 2: "effects", 3: "brief_key", 4: "session_pattern", 5: "search_limits",
                6: "reminder", 7: "predicted_failures"}


def solution_answer(exercise):
    """Run the printed solution's code and take the name the notebook's learner cell defines."""
    namespace: dict = {}
    exec(exercise.solution_code, namespace)  # noqa: S102 (the solution text the notebook prints)
    return namespace[ANSWER_NAMES[exercise.number]]


def verdict(capsys, exercise, answer):
    returned = exercise.check(answer)
    return returned, capsys.readouterr().out


def not_implemented(*args):
    raise NotImplementedError("your answer here")


# ---------------------------------------------------------------- shared behaviour


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: f"q{e.number}")
def test_the_printed_solution_passes(capsys, exercise):
    returned, out = verdict(capsys, exercise, solution_answer(exercise))
    assert returned is True
    assert out.startswith("Correct: ") and out.count("\n") == 1


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: f"q{e.number}")
def test_none_is_not_attempted_yet(capsys, exercise):
    returned, out = verdict(capsys, exercise, None)
    assert returned is False
    assert out.startswith("Not attempted yet: ")
    assert "Traceback" not in out


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: f"q{e.number}")
def test_hint_and_solution_print_the_same_text_every_time(capsys, exercise):
    exercise.hint()
    exercise.solution()
    first = capsys.readouterr().out
    exercise.hint()
    exercise.solution()
    assert capsys.readouterr().out == first
    assert first.startswith("Hint: ") and "\nSolution:\n" in first
    assert "0x" not in first and repr(exercise).startswith(f"<exercise q{exercise.number}: ")


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: f"q{e.number}")
@pytest.mark.parametrize("answer", [42, "text", [1], object()], ids=["int", "str", "list", "object"])
def test_a_nonsense_answer_is_incorrect_never_a_traceback(capsys, exercise, answer):
    if exercise is q4 and answer == "text":
        answer = "t[e"  # a str is the right type for q4: make it an invalid regex instead
    returned, out = verdict(capsys, exercise, answer)
    assert returned is False
    assert out.startswith("Incorrect: ")


# ---------------------------------------------------------------- q1: a status lookup


def test_q1_stub_that_still_raises_not_implemented_is_not_attempted(capsys):
    returned, out = verdict(capsys, q1, not_implemented)
    assert returned is False
    assert out == (
        "Not attempted yet: replace the `raise NotImplementedError` line in `draft_status` "
        "with your lookup, then run this cell again.\n"
    )


def test_q1_another_right_lookup_passes(capsys):
    def lookup(drafts, draft_id, text):
        return save_draft({}, draft_id, text) if drafts.get(draft_id) == text else None

    assert verdict(capsys, q1, lookup)[0] is True


def test_q1_always_not_done_makes_the_runner_write_twice(capsys):
    returned, out = verdict(capsys, q1, lambda drafts, draft_id, text: None)
    assert returned is False
    assert out == (
        "Incorrect: the draft was saved but the reply was lost; your lookup answered \"not "
        "done\", so the runner saved it again: 2 handler calls.\n"
    )


def test_q1_checking_only_the_id_claims_a_save_that_never_happened(capsys):
    def by_id(drafts, draft_id, text):
        return {"draft_id": draft_id, "chars": len(text)} if draft_id in drafts else None

    returned, out = verdict(capsys, q1, by_id)
    assert returned is False
    assert "only an older text was saved" in out and "Compare the saved text" in out


def test_q1_a_lookup_that_raises_for_a_missing_draft(capsys):
    returned, out = verdict(capsys, q1, lambda drafts, draft_id, text: drafts[draft_id])
    assert returned is False
    assert out.startswith("Incorrect: with nothing saved, your lookup raised KeyError: 'draft-7'.")


def test_q1_a_receipt_unlike_the_handlers(capsys):
    def partial(drafts, draft_id, text):
        return {"draft_id": draft_id} if drafts.get(draft_id) == text else None

    returned, out = verdict(capsys, q1, partial)
    assert returned is False
    assert "your lookup's receipt differs from save_draft's" in out


# ---------------------------------------------------------------- q2: effect levels


def test_q2_all_none_is_not_attempted_and_effect_members_are_accepted(capsys):
    assert verdict(capsys, q2, dict.fromkeys(TOOLS_TO_CLASSIFY))[1].startswith("Not attempted yet: ")
    from agentkit import Effect

    right = {name: Effect(value) for name, value in solution_answer(q2).items()}
    assert verdict(capsys, q2, right)[0] is True


def test_q2_a_message_sent_as_a_read_is_sent_twice(capsys):
    answer = {**solution_answer(q2), "send_sms": "read"}
    returned, out = verdict(capsys, q2, answer)
    assert returned is False
    assert out == (
        "Incorrect: 1 of 6 tools have another level:\n"
        "  - send_sms: as read, after a dropped connection it happened 2 times, nobody was "
        "asked, and the model read ok; it cannot be taken back: it must wait for a person and "
        "never be retried.\n"
    )


def test_q2_a_refund_as_reversible_runs_without_approval(capsys):
    returned, out = verdict(capsys, q2, {**solution_answer(q2), "refund_payment": "reversible_write"})
    assert returned is False
    assert ("refund_payment: as reversible_write, after a dropped connection it happened 1 time, "
            "nobody was asked, and the model read ok") in out


@pytest.mark.parametrize("name", ["save_reply_draft", "get_invoice", "move_meeting"])
def test_q2_an_over_cautious_irreversible_answer_is_graded_not_crashed(capsys, name):
    """An irreversible write is never retried (ToolSpec refuses max_attempts > 1): the check
    plays it with one attempt, and says what the caution cost: a person asked, and the model
    left with outcome_unknown after a dropped connection, for an action that happened once."""
    returned, out = verdict(capsys, q2, {**solution_answer(q2), name: "irreversible_write"})
    assert returned is False
    assert "raised" not in out
    assert out.startswith("Incorrect: 1 of 6 tools have another level:\n")
    assert (f"  - {name}: as irreversible_write, after a dropped connection it happened 1 time, "
            "a person was asked first, and the model read outcome_unknown; too cautious: ") in out
    if name == "get_invoice":
        assert "a read changes nothing" in out
    else:
        assert "a key and a status lookup make a repeat safe" in out


def test_q2_a_read_as_a_reversible_write_is_too_cautious(capsys):
    out = verdict(capsys, q2, {**solution_answer(q2), "search_flights": "reversible_write"})[1]
    assert ("search_flights: as reversible_write, after a dropped connection it happened 1 time, "
            "nobody was asked, and the model read ok; too cautious: a read changes nothing") in out


@pytest.mark.parametrize(("name", "level"), list(itertools.product(TOOLS_TO_CLASSIFY, EFFECT_CHOICES)))
def test_q2_every_tool_at_every_level_is_graded(capsys, name, level):
    """No level crashes the checker for any tool: right, too careful or not careful enough."""
    returned, out = verdict(capsys, q2, {**solution_answer(q2), name: level})
    assert "raised" not in out
    assert returned is out.startswith("Correct: ")
    if not returned:
        assert f"  - {name}: as {level}, after a dropped connection it happened " in out


def test_q2_a_typo_and_a_missing_tool_are_named(capsys):
    out = verdict(capsys, q2, {**solution_answer(q2), "get_invoice": "write"})[1]
    assert out == (
        "Incorrect: 'write' (for get_invoice) is not an effect; use one of "
        f"{', '.join(EFFECT_CHOICES)}.\n"
    )
    answer = solution_answer(q2)
    del answer["move_meeting"]
    assert verdict(capsys, q2, answer)[1] == "Incorrect: no effect given for move_meeting.\n"
    partly = {**dict.fromkeys(TOOLS_TO_CLASSIFY), "send_sms": "irreversible_write"}
    assert verdict(capsys, q2, partly)[1].startswith("Incorrect: still None: search_flights, get_invoice")


# ---------------------------------------------------------------- q3: an idempotency key


def _digest(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_q3_stub_is_not_attempted_and_a_whole_argument_hash_also_passes(capsys):
    assert verdict(capsys, q3, lambda context, arguments: not_implemented())[1].startswith(
        "Not attempted yet: replace the `raise NotImplementedError` line in `brief_key`"
    )
    import json

    def whole(context, arguments):
        return context.task_id + ":" + _digest(json.dumps(arguments, sort_keys=True))

    assert verdict(capsys, q3, whole)[0] is True


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (lambda c, a: f"{c.task_id}:{a['path']}",
         "a save with another content got the same key as the first one, so the runner refused "
         "it as idempotency_conflict: put the content (by its hash) in the key."),
        (lambda c, a: f"{c.task_id}:{_digest(a['content'])}",
         "a save with another path got the same key as the first one, so the runner refused it "
         "as idempotency_conflict: put the path in the key."),
        (lambda c, a: f"{a['path']}:{_digest(a['content'])}",
         "a save of the same brief for another task got the first task's key, so the runner "
         "replayed the first task's result instead of saving: put the task id (context.task_id) "
         "in the key."),
        (lambda c, a: f"{a['task_id']}:{a['path']}:{_digest(a['content'])}",
         "save_brief takes no task_id argument: the task is the runner's, not the model's. Read "
         "it from context.task_id."),
        (lambda c, a: f"{c.task_id}:{a['path']}:{a['content']}",
         "for a 10,000-character brief your key is 10,025 characters long and copies a secret "
         "from the text: keys are stored and logged, so the content must enter by its sha256 hash."),
    ],
    ids=["no-content", "no-path", "no-task", "task-from-arguments", "raw-content"],
)
def test_q3_wrong_keys_are_explained_by_what_the_runner_did(capsys, key, expected):
    returned, out = verdict(capsys, q3, key)
    assert returned is False
    assert out == f"Incorrect: {expected}\n"


def test_q3_a_key_that_changes_every_call_writes_twice(capsys):
    counter = itertools.count(1)
    returned, out = verdict(capsys, q3, lambda c, a: f"key-{next(counter)}")
    assert returned is False
    assert out.startswith("Incorrect: the same save asked twice ran 2 times: your key changed")


# ---------------------------------------------------------------- q4: a redaction pattern


def test_q4_the_default_patterns_really_leak_the_session():
    data = invoke_tool(report_registry(), "connect_report", {"service": "billing"})["data"]
    assert data == connect_report("billing") and "sess_" in data


@pytest.mark.parametrize("pattern", [r"sess_\w+", r"sess_[0-9a-f]+", r"(?P<secret>sess_[0-9a-f]{32})"])
def test_q4_other_right_patterns_pass(capsys, pattern):
    returned, out = verdict(capsys, q4, pattern)
    assert returned is True
    assert out == (
        "Correct: no session id reached the model in any report (4 span(s) redacted), and the "
        "status, latency and expiry are still visible.\n"
    )


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        (r"sess_[0-9a-f]{8}", "the model still sees 4 session id(s), whole or in part"),
        (r"session", "the model still sees 4 session id(s), whole or in part"),
        (r"sess_.*", "your pattern also hid what the model needs to read, e.g. billing: 'expires in 30 min'"),
        (r"(", "that is not a valid regular expression: missing ), unterminated subpattern"),
        ([r"sess_\w+"], "give one pattern (a str), not a list."),
    ],
)
def test_q4_leaky_broad_and_broken_patterns(capsys, pattern, expected):
    returned, out = verdict(capsys, q4, pattern)
    assert returned is False
    assert out.startswith(f"Incorrect: {expected}")


# ---------------------------------------------------------------- q5: limits for a read


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ({"max_attempts": 2, "timeout_seconds": 2.0},
         "two dropped connections in a row used up all 2 attempt(s): the model saw "
         "transient_failure after 2 handler calls."),
        ({"max_attempts": 3, "timeout_seconds": 0.5},
         "healthy searches take up to 0.8 s; with timeout_seconds=0.5 the boundary would give up "
         "on healthy calls and report outcome_unknown."),
        ({"max_attempts": 5, "timeout_seconds": 3},
         "if the search hangs, each of the 5 attempts waits 3 s: 15 s in all, more than 10 s "
         "(and a tool with max_concurrency may also wait up to timeout_seconds for a slot first)."),
        ({"max_attempts": 0, "timeout_seconds": 3},
         "the ToolSpec refuses these limits: max_attempts must be an integer >= 1."),
        ({"max_attempts": 3}, "search_limits needs timeout_seconds."),
    ],
)
def test_q5_wrong_limits(capsys, limits, expected):
    returned, out = verdict(capsys, q5, limits)
    assert returned is False
    assert out == f"Incorrect: {expected}\n"


def test_q5_right_limits_report_what_happened(capsys):
    assert verdict(capsys, q5, {"max_attempts": None, "timeout_seconds": None})[1].startswith(
        "Not attempted yet: "
    )
    returned, out = verdict(capsys, q5, {"max_attempts": 4, "timeout_seconds": 2.5})
    assert returned is True
    assert out == (
        "Correct: two drops then an answer: ok after 3 handler calls; a search that is down "
        "gives up after 4 calls; a hang holds the agent at most 4 × 2.5 s = 10 s.\n"
    )


# ---------------------------------------------------------------- q6: your own tool, audited


def reminder_parts(**changes):
    parts = dict(solution_answer(q6))
    parts.update(changes)
    return parts


def test_q6_stubs_are_not_attempted(capsys):
    returned, out = verdict(capsys, q6, {"effect": None, "idempotency_key": not_implemented,
                                         "status_lookup": not_implemented})
    assert returned is False and out.startswith("Not attempted yet: fill in the three parts")


def test_q6_another_right_answer_passes(capsys):
    def status(reminders, reminder_id, when, text):
        saved = reminders.get(reminder_id) or {}
        if (saved.get("when"), saved.get("text")) == (when, text):
            return {"reminder_id": reminder_id, "when": when, "set": True}
        return None

    key = lambda context, a: "|".join([context.task_id, "reminder", a["reminder_id"]])
    assert verdict(capsys, q6, reminder_parts(status_lookup=status, idempotency_key=key))[0] is True


def test_q6_wrong_levels_are_explained(capsys):
    returned, out = verdict(capsys, q6, reminder_parts(effect="read"))
    assert returned is False and "retried blindly" in out
    returned, out = verdict(capsys, q6, reminder_parts(effect="irreversible_write"))
    assert returned is False and "waits for a person" in out


def test_q6_a_content_addressed_key_is_right_too_and_says_its_design(capsys):
    key = lambda context, a: f"{context.task_id}:{a['reminder_id']}:{a['text']}"
    returned, out = verdict(capsys, q6, reminder_parts(idempotency_key=key))
    assert returned is True
    assert "Your key is content-addressed" in out
    returned, out = verdict(capsys, q6, solution_answer(q6))
    assert returned is True and "Your key is id-addressed" in out


def test_q6_a_key_that_changes_on_every_call_names_no_design(capsys):
    import itertools

    counter = itertools.count()
    key = lambda context, a: f"{context.task_id}:{a['reminder_id']}:{next(counter)}"
    returned, out = verdict(capsys, q6, reminder_parts(idempotency_key=key))
    assert returned is False
    assert "(your key is unstable:" in out.splitlines()[0]
    assert "  - same_write_repeated: the model saw ok after 2 handler call(s)" in out


def test_q6_a_lookup_that_never_finds_the_write_fails_the_doubt_rows(capsys):
    returned, out = verdict(capsys, q6, reminder_parts(status_lookup=lambda *a: None))
    assert returned is False
    failed = [line.split(":")[0].strip(" -") for line in out.splitlines()[1:]]
    assert failed == ["transient_disconnect", "timeout_outcome_unknown", "process_killed_mid_write"]
    assert "the model saw ok after 2 handler call(s)" in out  # written twice, counted


def test_q6_a_lookup_that_raises_is_reported(capsys):
    def broken(reminders, reminder_id, when, text):
        raise KeyError(reminder_id)

    returned, out = verdict(capsys, q6, reminder_parts(status_lookup=broken))
    assert returned is False and out == (
        "Incorrect: called once with nothing set, your key or lookup raised KeyError: 'rem-1'.\n")


# ---------------------------------------------------------------- q7: read an audit


def test_q7_a_partial_prediction_names_each_missed_row_with_its_real_count(capsys):
    returned, out = verdict(capsys, q7, {"same_write_repeated"})
    assert returned is False
    assert out.splitlines() == [
        "Incorrect: 7 of 10 rows predicted right:",
        "  - same_key_other_payload fails too: the model saw ok after 2 handler call(s); the write ran 2 "
        "times: the key changed between two calls of one intent (a clock, a counter or randomness in it, "
        "or the order of the arguments: json.dumps without sort_keys), so the runner never "
        "recognised the intent.",
        "  - process_killed_mid_write fails too: the model saw ok after 2 handler call(s); the write ran 2 "
        "times: the key changed between two calls of one intent (a clock, a counter or randomness in it, "
        "or the order of the arguments: json.dumps without sort_keys), so the runner never "
        "recognised the intent.",
        "  - disconnect_before_write fails too: the model saw ok after 1 handler call(s); this payload was "
        "never written, but the status lookup said done: it must compare what is saved with what was "
        "asked, not only check that the id exists.",
    ]


def test_q7_a_row_that_passes_is_named_and_unknown_rows_refused(capsys):
    right = solution_answer(q7)
    returned, out = verdict(capsys, q7, right | {"transient_disconnect"})
    assert returned is False and "transient_disconnect passes: ok after 1 handler call(s)" in out
    returned, out = verdict(capsys, q7, ["write_twice"])
    assert returned is False and out.startswith("Incorrect: no such row: write_twice;")
    assert verdict(capsys, q7, sorted(right))[0] is True  # a list is as good as a set
