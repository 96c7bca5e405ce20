"""Exercise 5 (notebook 06): ``max_attempts`` and ``timeout_seconds`` for a read."""

from __future__ import annotations

import dataclasses
from typing import Any

from agentkit.boundary.registry import ToolRegistry
from agentkit.boundary.spec import Effect, ToolSpec
from agentkit.demo import faults
from agentkit.lessons.exercises.framework import Exercise, NotAttempted, Right
from agentkit.policy.backoff import no_wait
from agentkit.policy.runner import ToolRunner

__all__ = ["ReadLimitsExercise", "q5"]


class ReadLimitsExercise(Exercise):
    """Pick ``max_attempts`` and ``timeout_seconds`` for the read ``search_catalog``.

    The search answers within 0.8 s when healthy, its connection sometimes drops twice in a
    row, and a hung search must not hold the agent for more than 10 s. The retry count is
    checked by behaviour: the search is made to drop twice and then answer, and to fail for
    good, behind a real ToolRunner, and the handler's calls are counted. The two time rules
    are checked by arithmetic (``timeout_seconds`` against 0.8 s, ``max_attempts ×
    timeout_seconds`` against 10 s): waiting out a real hang would make this check take
    seconds, and the boundary's timeout is already tested in the package's own tests.

    The true worst case of one attempt is *two* waits, each up to ``timeout_seconds``: a wait
    for a concurrency slot (only when the spec sets ``max_concurrency``), then the run itself
    (see :mod:`agentkit.boundary.concurrency`). ``search_catalog`` sets no
    ``max_concurrency``, so here an attempt waits at most ``timeout_seconds`` and the agent
    at most ``max_attempts × timeout_seconds`` (plus the short backoff between attempts);
    with a slot limit it would be up to ``max_attempts × 2 × timeout_seconds``.
    """

    number = 5
    title = "max_attempts and timeout_seconds for a read"
    hint_text = (
        "Two drops then an answer need at least 3 attempts. The timeout must be longer than "
        "a healthy answer (0.8 s), and every attempt may wait that long: max_attempts × "
        "timeout_seconds ≤ 10."
    )
    solution_code = '''\
search_limits = {"max_attempts": 3, "timeout_seconds": 2.0}  # 3 × 2.0 s = 6 s at worst
'''
    placeholder_text = (
        "set `search_limits` to {\"max_attempts\": …, \"timeout_seconds\": …}, then run this "
        "cell again."
    )

    HEALTHY_SECONDS = 0.8
    WORST_SECONDS = 10.0

    def _problem(self, answer: Any) -> str | None:
        if not isinstance(answer, dict):
            return f"search_limits must be a dict, not {type(answer).__name__}."
        missing = [k for k in ("max_attempts", "timeout_seconds") if k not in answer]
        if missing:
            return f"search_limits needs {' and '.join(missing)}."
        attempts, timeout = answer["max_attempts"], answer["timeout_seconds"]
        if attempts is None and timeout is None:
            raise NotAttempted
        try:
            spec = ToolSpec("search_catalog", "Search the product catalog.", Effect.READ,
                            timeout, attempts, 2000, _search_catalog)
        except ValueError as exc:
            return f"the ToolSpec refuses these limits: {exc}."
        if timeout <= self.HEALTHY_SECONDS:
            return (
                f"healthy searches take up to {self.HEALTHY_SECONDS} s; with timeout_seconds="
                f"{timeout:g} the boundary would give up on healthy calls and report "
                "outcome_unknown."
            )
        flaky = _play_read(spec, faults.fail_times(_search_catalog, 2))
        if not flaky["result"].get("ok"):
            return (
                f"two dropped connections in a row used up all {attempts} attempt(s): the "
                f"model saw {flaky['result'].get('error')} after {flaky['calls']} handler calls."
            )
        down = _play_read(spec, faults.fail_times(_search_catalog, 1_000))
        worst = attempts * timeout
        if worst > self.WORST_SECONDS:
            return (
                f"if the search hangs, each of the {attempts} attempts waits {timeout:g} s: "
                f"{worst:g} s in all, more than {self.WORST_SECONDS:g} s (and a tool with "
                "max_concurrency may also wait up to timeout_seconds for a slot first)."
            )
        return Right(
            f"two drops then an answer: ok after {flaky['calls']} handler calls; a search "
            f"that is down gives up after {down['calls']} calls; a hang holds the agent at "
            f"most {attempts} × {timeout:g} s = {worst:g} s."
        )


def _search_catalog(query: str) -> str:
    """Search the product catalog."""
    return f"3 products match {query!r}"


def _play_read(spec: ToolSpec, fault: faults.Fault) -> dict[str, Any]:
    spec = dataclasses.replace(spec, handler=fault)
    runner = ToolRunner(ToolRegistry([spec]), sleep=no_wait)
    result = runner.call(spec.name, {"query": "usb-c cable"})
    return {"result": result, "calls": fault.calls}


q5 = ReadLimitsExercise()
