"""Exercise 4 (notebook 06): a redaction pattern for a leaked session cookie."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from agentkit.boundary.invoke import invoke_tool
from agentkit.boundary.registry import ToolRegistry
from agentkit.boundary.spec import Effect, ToolSpec
from agentkit.lessons.exercises.framework import Exercise, Right

__all__ = ["SERVICES", "RedactionExercise", "connect_report", "q4", "report_registry"]


#: The services exercise 4's tool reports on.
SERVICES = ("billing", "search", "mail")


def _session_id(service: str, n: int = 0) -> str:
    return "sess_" + hashlib.sha256(f"{service}:{n}".encode()).hexdigest()[:32]


def connect_report(service: str) -> str:
    """The leaky handler of exercise 4: a health report that also prints the session cookie
    its client used (``sess_`` and 32 hex digits), a format the default patterns do not know."""
    if service not in SERVICES:
        raise LookupError(service)
    lines = [
        f"service {service}: healthy (latency 41 ms)",
        f"connected with session {_session_id(service)}, expires in 30 min",
    ]
    if service == "mail":
        lines.append(f"retried once; old session {_session_id(service, 1)}")
    return "\n".join(lines)


def report_registry(patterns: Any = ()) -> ToolRegistry:
    """A registry holding ``connect_report`` with extra redaction ``patterns``."""
    spec = ToolSpec("connect_report", "Report a service's health.", Effect.READ, 2.0, 1, 2000,
                    connect_report)
    return ToolRegistry([spec], redact_patterns=patterns)


class RedactionExercise(Exercise):
    """Give the registry a redaction pattern for the session cookie ``connect_report`` leaks.

    Checked by behaviour: the pattern is installed in a real registry and every service's
    report is read back through ``invoke_tool``: no session id may reach the model, and the
    health facts around it (status, latency, expiry) must still be there. A pattern that is
    too narrow leaks; one that is too broad hides what the model needs.
    """

    number = 4
    title = "a redaction pattern for a leaked session cookie"
    hint_text = (
        "A session id is \"sess_\" followed by 32 lowercase hex digits: [0-9a-f]{32}. Match "
        "exactly that, so the words around it (\"expires in 30 min\") stay visible."
    )
    solution_code = '''\
session_pattern = r"\\bsess_[0-9a-f]{32}\\b"
'''
    placeholder_text = (
        "set `session_pattern` to a regular expression (a str), then run this cell again."
    )

    KEEP = ("healthy", "latency 41 ms", "expires in 30 min", "retried once")

    def _problem(self, answer: Any) -> str | None:
        if isinstance(answer, (list, tuple)):
            return "give one pattern (a str), not a list."
        if not isinstance(answer, (str, re.Pattern)):
            return f"session_pattern must be a str, not {type(answer).__name__}."
        try:
            registry = report_registry([answer])
        except re.error as exc:
            return f"that is not a valid regular expression: {exc}."
        leaked, hidden, redactions = [], [], 0
        for service in SERVICES:
            result = invoke_tool(registry, "connect_report", {"service": service})
            if not result.get("ok"):
                return f"the report for {service} failed with {result.get('error')}."
            data = result["data"]
            redactions += result.get("redactions", 0)
            for n in (0, 1) if service == "mail" else (0,):
                if _leaks(_session_id(service, n), data):
                    leaked.append(f"{service}: {_session_id(service, n)}")
            raw = connect_report(service)
            hidden += [f"{service}: {word!r}" for word in self.KEEP if word in raw and word not in data]
        if leaked:
            return (
                f"the model still sees {len(leaked)} session id(s), whole or in part, e.g. "
                f"{leaked[0]}: all 32 hex digits must go."
            )
        if hidden:
            return (
                "your pattern also hid what the model needs to read, e.g. "
                f"{hidden[0]}: match the session id only."
            )
        return Right(
            f"no session id reached the model in any report ({redactions} span(s) redacted), "
            "and the status, latency and expiry are still visible."
        )


def _leaks(session: str, data: str, piece: int = 4) -> bool:
    """True when any ``piece`` hex digits of the session id still reach the model: half a
    secret is still a secret."""
    digits = session[len("sess_"):]
    return any(digits[i : i + piece] in data for i in range(len(digits) - piece + 1))


q4 = RedactionExercise()
