"""The MCP conformance suite's test tools, written as agentkit tools (tests/faces/test_mcp_conformance.py
serves them with ``serve-mcp --transport streamable-http --registry _conformance_tools:registry``).

Each tool is what the suite's scenario of the same name asks a server to implement
(``@modelcontextprotocol/conformance``, ``dist/index.js``), through the kit's own seams only:
its log lines go through Python ``logging``, its progress through
``agentkit.current_call().report_progress``, its question to the user through the kit's
elicited approval (an irreversible write, under ``--approvals elicit``). What a tools server
does not offer (image, audio and embedded content, sampling, the elicitation-schema tools)
is not here: tests/faces/mcp_conformance_baseline.json lists those scenarios with the reason.

The sleeps are the scenarios' own ("after ~50ms"): a client must see notifications arrive
while the call runs. They are the tools' behaviour, not a test's synchronisation.
"""

from __future__ import annotations

import logging
import time

from agentkit import ToolRegistry, ToolSpec, current_call

#: The logger the tools log on; it lets every record through to the handlers (the client's
#: session level decides what it gets).
tool_log = logging.getLogger("conformance.tools")
tool_log.setLevel(logging.DEBUG)

SIMPLE_TEXT = "This is a simple text response for testing."
ERROR_TEXT = "This tool intentionally returns an error for testing"


def simple_text() -> str:
    return SIMPLE_TEXT


def tool_with_logging() -> str:
    tool_log.info("Tool execution started")
    time.sleep(0.05)
    tool_log.info("Tool processing data")
    time.sleep(0.05)
    tool_log.info("Tool execution completed")
    return "Logging tool finished: three log messages sent"


def tool_with_progress() -> str:
    call = current_call()
    assert call is not None
    for step, progress in enumerate((0, 50, 100)):
        if step:
            time.sleep(0.05)
        call.report_progress(progress, total=100, message=f"{progress}% done")
    return "Progress tool finished: 0, 50, 100 of 100"


def error_handling() -> str:
    raise RuntimeError(ERROR_TEXT)


def elicitation(message: str) -> str:
    """Runs once a person accepted it (the kit's elicited approval asked the user first)."""
    return f"User response: accept ({message})"


def json_schema_2020_12(name: str = "", address: dict[str, str] | None = None) -> str:
    return f"received {name or 'no name'}"


JSON_SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        },
    },
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}


def make_registry() -> ToolRegistry:
    return ToolRegistry([
        ToolSpec("test_simple_text", "Returns simple text.", "read", 5.0, 1, 2000, simple_text),
        ToolSpec("test_tool_with_logging", "Logs three lines while it runs.", "read", 5.0, 1,
                 2000, tool_with_logging),
        ToolSpec("test_tool_with_progress", "Reports progress 0, 50, 100 of 100.", "read", 5.0,
                 1, 2000, tool_with_progress),
        ToolSpec("test_error_handling", "Always fails.", "read", 5.0, 1, 2000, error_handling),
        ToolSpec("test_elicitation", "An irreversible write: the user is asked first.",
                 "irreversible_write", 5.0, 1, 2000, elicitation),
        ToolSpec("json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features", "read",
                 5.0, 1, 2000, json_schema_2020_12, parameters=JSON_SCHEMA_2020_12),
    ])


registry = make_registry()
