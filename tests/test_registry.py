"""ToolSpec and ToolRegistry: refused policy values, derived schemas, model-visible lists."""

from __future__ import annotations

import dataclasses
import functools
from typing import Annotated, Literal

import pytest

from agentkit import Effect, ToolRegistry, ToolSpec


def search(query: str, limit: int = 3) -> list:
    return []


def make(**overrides):
    fields = {"name": "search", "description": "Search the notes.", "effect": "read",
              "timeout_seconds": 1.0, "max_attempts": 3, "max_output_chars": 100, "handler": search}
    fields.update(overrides)
    return ToolSpec(**fields)


def test_the_chapters_seven_fields_come_first_in_order():
    import dataclasses

    names = [f.name for f in dataclasses.fields(ToolSpec)]
    assert names[:7] == ["name", "description", "effect", "timeout_seconds", "max_attempts",
                         "max_output_chars", "handler"]


def test_effect_accepts_the_plain_string():
    assert make(effect="reversible_write").effect is Effect.REVERSIBLE_WRITE
    assert Effect("read") is Effect.READ


@pytest.mark.parametrize(
    "overrides",
    [
        {"effect": "delete"},
        {"timeout_seconds": 0},
        {"timeout_seconds": -1},
        {"timeout_seconds": float("inf")},
        {"max_attempts": 0},
        {"max_attempts": 1.5},
        {"max_output_chars": 0},
        {"max_concurrency": 0},
        {"name": "has space"},
        {"handler": "not callable"},
    ],
)
def test_bad_policy_values_are_refused_when_the_spec_is_made(overrides):
    with pytest.raises(ValueError):
        make(**overrides)


def test_spec_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        make().max_attempts = 10  # type: ignore[misc]


def test_duplicate_tool():
    registry = ToolRegistry([make()])
    with pytest.raises(ValueError, match="duplicate_tool"):
        registry.register(make())


def test_registry_lookup_and_iteration():
    registry = ToolRegistry([make(), make(name="read_doc", handler=lambda doc_id: doc_id,
                                          parameters={"type": "object"})])
    assert registry.names() == ["search", "read_doc"]
    assert [s.name for s in registry] == ["search", "read_doc"]
    assert registry.get("search").name == "search"
    assert registry.get("nope") is None and registry.get(None) is None  # type: ignore[arg-type]


def test_parameters_are_derived_once_at_registration():
    def handler(
        query: str,
        limit: int = 3,
        ratio: float = 0.5,
        exact: bool = False,
        tags: list[str] | None = None,
        mode: Literal["fast", "full"] = "fast",
        extra: dict = None,  # type: ignore[assignment]  # noqa: RUF013 (implicit Optional, on purpose)
        note: Annotated[str, "a note for the reader"] = "",
        maybe: int | None = None,
    ) -> str:
        return query

    registered = ToolRegistry().register(make(handler=handler))
    assert registered.parameters == {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "limit": {"type": "integer", "default": 3},
            "ratio": {"type": "number", "default": 0.5},
            "exact": {"type": "boolean", "default": False},
            "tags": {"type": ["array", "null"], "items": {"type": "string"}, "default": None},
            "mode": {"enum": ["fast", "full"], "default": "fast"},
            "extra": {"type": ["object", "null"], "default": None},
            "note": {"type": "string", "description": "a note for the reader", "default": ""},
            "maybe": {"type": ["integer", "null"], "default": None},
        },
        "required": ["query"],
        "additionalProperties": False,
    }


def test_wrappers_are_followed_to_the_real_signature():
    def counting(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)

        return wrapper

    registered = ToolRegistry().register(make(handler=counting(search)))
    assert registered.parameters["required"] == ["query"]
    assert set(registered.parameters["properties"]) == {"query", "limit"}


def test_an_explicit_schema_wins():
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    assert ToolRegistry().register(make(parameters=schema)).parameters == schema


def test_an_invalid_explicit_schema_is_refused_at_registration():
    with pytest.raises(ValueError):
        ToolRegistry().register(make(parameters={"type": "object", "properties": {"q": {"type": 12}}}))


def test_a_type_without_a_schema_is_refused_at_registration():
    def handler(when: complex) -> str:
        return ""

    with pytest.raises(ValueError, match="explicit parameters"):
        ToolRegistry().register(make(handler=handler))


def test_validators_are_compiled_once(monkeypatch):
    import fastjsonschema

    calls = []
    real = fastjsonschema.compile
    monkeypatch.setattr(fastjsonschema, "compile", lambda s: calls.append(s) or real(s))
    from agentkit import invoke_tool

    registry = ToolRegistry([make()])
    for _ in range(5):
        invoke_tool(registry, "search", {"query": "x"})
    assert len(calls) == 1


@pytest.fixture
def three_tools() -> ToolRegistry:
    return ToolRegistry([
        make(),
        make(name="save_brief", effect="reversible_write", handler=lambda path, content: path,
             parameters={"type": "object", "properties": {"path": {"type": "string"},
                                                           "content": {"type": "string"}}}),
        make(name="send_message", effect="irreversible_write", max_attempts=1,
             handler=lambda to, body: to,
             parameters={"type": "object", "properties": {"to": {"type": "string"},
                                                           "body": {"type": "string"}}}),
    ])


def test_describe_openai(three_tools):
    tools = three_tools.describe("openai")
    assert [t["function"]["name"] for t in tools] == ["search", "save_brief", "send_message"]
    for tool, spec in zip(tools, three_tools, strict=True):
        assert tool == {"type": "function", "function": {
            "name": spec.name, "description": spec.description, "parameters": spec.parameters}}


def test_describe_anthropic(three_tools):
    for tool, spec in zip(three_tools.describe("anthropic"), three_tools, strict=True):
        assert tool == {"name": spec.name, "description": spec.description, "input_schema": spec.parameters}


def test_describe_mcp_annotations_follow_the_effect(three_tools):
    tools = {t["name"]: t for t in three_tools.describe("mcp")}
    for tool, spec in zip(tools.values(), three_tools, strict=True):
        assert set(tool) == {"name", "description", "inputSchema", "annotations"}
        assert tool["inputSchema"] == spec.parameters
    assert tools["search"]["annotations"] == {
        "readOnlyHint": True, "destructiveHint": False, "idempotentHint": True}
    assert tools["save_brief"]["annotations"] == {
        "readOnlyHint": False, "destructiveHint": False, "idempotentHint": True}
    assert tools["send_message"]["annotations"] == {
        "readOnlyHint": False, "destructiveHint": True, "idempotentHint": False}


def test_describe_unknown_format(three_tools):
    with pytest.raises(ValueError, match="openai"):
        three_tools.describe("gemini")


def test_spec_repr_is_deterministic():
    text = repr(make(status_lookup=lambda **kw: None))
    assert "0x" not in text and "name='search'" in text


def test_a_callable_object_s_parameters_come_from_its_call_method():
    class Search:
        def __call__(self, query: str, limit: int = 3) -> list[str]:
            return [query] * limit

    registered = ToolRegistry().register(make(handler=Search()))
    assert registered.parameters == {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "default": 3}},
        "required": ["query"],
        "additionalProperties": False,
    }


def test_a_callable_object_with_an_unresolvable_hint_is_a_value_error_naming_its_class():
    class Broken:
        def __call__(self, query: NoSuchType) -> str:  # type: ignore[name-defined]  # noqa: F821
            return query

    with pytest.raises(ValueError, match="Broken"):
        ToolRegistry().register(make(handler=Broken()))
