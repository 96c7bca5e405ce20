"""``describe("openai" | "anthropic" | "mcp")`` checked against the official SDKs' own types, so a
host can pass the tool list as it is (issue 12). Each entry is validated by pydantic against
the SDK's request type (its TypedDicts for OpenAI and Anthropic, its model for MCP), and must
carry no key the type does not declare: a key the SDK silently dropped would still be a shape
the API refuses.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter

from agentkit import ToolRegistry, ToolSpec
from agentkit.demo.tools import make_demo_registry


def registries(tmp_path: Path) -> list[ToolRegistry]:
    def plain(query: str, limit: int = 3, exact: bool | None = None) -> str:
        return query

    async def coroutine(ids: list[str], payload: dict[str, Any]) -> str:
        return ""

    extra = ToolRegistry([
        ToolSpec("plain", "Defaults and an optional.", "read", 1.0, 1, 100, plain),
        ToolSpec("coroutine", "An async handler.", "reversible_write", 1.0, 1, 100, coroutine),
    ])
    return [make_demo_registry(tmp_path), extra]


def declared_keys(typed_dict: Any) -> set[str]:
    return set(typing.get_type_hints(typed_dict))


def test_describe_openai_is_a_chat_completion_tool_param(tmp_path: Path) -> None:
    chat = pytest.importorskip("openai.types.chat")
    from openai.types.shared_params import FunctionDefinition

    adapter = TypeAdapter(chat.ChatCompletionToolParam)
    for registry in registries(tmp_path):
        for entry in registry.describe("openai"):
            adapter.validate_python(entry)
            assert set(entry) <= declared_keys(chat.ChatCompletionToolParam)
            assert set(entry["function"]) <= declared_keys(FunctionDefinition)
            assert entry["function"]["parameters"]["type"] == "object"


def test_describe_anthropic_is_a_tool_param(tmp_path: Path) -> None:
    types = pytest.importorskip("anthropic.types")
    from anthropic.types.tool_param import InputSchemaTyped

    adapter = TypeAdapter(types.ToolParam)
    schema_adapter = TypeAdapter(InputSchemaTyped)
    for registry in registries(tmp_path):
        for entry in registry.describe("anthropic"):
            adapter.validate_python(entry)
            schema_adapter.validate_python(entry["input_schema"])  # the typed arm: type "object"
            assert set(entry) <= declared_keys(types.ToolParam)


def test_describe_mcp_is_the_sdks_tool(tmp_path: Path) -> None:
    mcp_types = pytest.importorskip("mcp.types")
    for registry in registries(tmp_path):
        for entry in registry.describe("mcp"):
            tool = mcp_types.Tool.model_validate(entry)
            assert tool.model_dump(by_alias=True, exclude_none=True) == entry


def test_a_shape_the_sdk_refuses_is_caught(tmp_path: Path) -> None:
    """The check can fail: an entry missing its required name is refused by both SDK types."""
    chat = pytest.importorskip("openai.types.chat")
    types = pytest.importorskip("anthropic.types")
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        TypeAdapter(types.ToolParam).validate_python({"input_schema": {"type": "object"}})
    with pytest.raises(ValidationError):
        TypeAdapter(chat.ChatCompletionToolParam).validate_python({"type": "function", "function": {}})
