"""ToolSpec and ToolRegistry: refused policy values, derived schemas, model-visible lists."""

from __future__ import annotations

import ast
import dataclasses
import functools
import logging
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Literal

import pytest

from agentkit import CallContext, Effect, ToolRegistry, ToolRunner, ToolSpec
from agentkit.demo import faults
from agentkit.policy.backoff import no_wait

ROOT = Path(__file__).resolve().parents[2]


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


# ------------------------------------------------------------------ the status lookup's signature


def create_ticket(request_id: str, title: str, priority: int = 3) -> dict:
    """Open a ticket."""
    return {"ticket": f"T-{request_id}"}


def bad_lookup(request_id: str) -> dict | None:
    return None


def needs_owner(request_id: str, title: str, priority: int = 3, *, owner: str) -> dict | None:
    return None


def needs_priority(request_id: str, title: str, priority: int) -> dict | None:
    return None


def positional(request_id: str, title: str, /, priority: int = 3) -> dict | None:
    return None


def open_handler(request_id: str, **fields: str) -> dict:
    """Open a ticket with any fields."""
    return {}


@pytest.mark.parametrize(
    ("handler", "lookup", "parameters", "reason"),
    [
        (create_ticket, bad_lookup, None, "it takes no parameter 'priority'"),
        (create_ticket, needs_owner, None, "it requires 'owner', which no call carries"),
        (create_ticket, needs_priority, None, "it requires 'priority', which a call may leave out"),
        (create_ticket, positional, None, "its parameter 'request_id' cannot be passed by keyword"),
        (open_handler, lambda request_id: None, None,
         "the handler takes **kwargs and the lookup does not"),
        # an explicit schema: its properties are what a call carries
        (open_handler, lambda request_id, title: None,
         {"type": "object", "properties": {"request_id": {"type": "string"},
                                           "title": {"type": "string"},
                                           "queue": {"type": "string"}},
          "required": ["request_id"], "additionalProperties": False},
         "it takes no parameter 'queue'"),
        (create_ticket, lambda request_id, title: None,
         {"type": "object", "properties": {"request_id": {"type": "string"}}},
         "it takes no parameter 'priority'"),  # an open schema: the handler's names get through
    ],
)
def test_a_status_lookup_that_cannot_take_the_tools_arguments_is_refused_when_the_spec_is_made(
    handler, lookup, parameters, reason,
):
    """Issue 30: ``bad_lookup(request_id)`` for a tool that also takes ``title`` was accepted,
    and failed only in a real timeout ("unexpected keyword argument 'title'" ->
    outcome_unknown). It is refused when the spec is made, as a bad handler is."""
    counted_handler, counted_lookup = faults.count_calls(handler), faults.count_calls(lookup)
    with pytest.raises(ValueError) as refused:
        make(name="create_ticket", effect="reversible_write", handler=counted_handler,
             status_lookup=counted_lookup, parameters=parameters)
    message = str(refused.value)
    assert message.startswith("status_lookup ") and "the arguments of create_ticket" in message
    assert reason in message
    assert counted_handler.calls == counted_lookup.calls == 0  # checked, never called


def test_the_refusal_names_the_lookup_as_it_was_written():
    with pytest.raises(ValueError, match=r"^status_lookup bad_lookup\(request_id\) cannot be called "
                                         r"with the arguments of create_ticket: it takes no "
                                         r"parameter 'priority'"):
        make(name="create_ticket", effect="reversible_write", handler=create_ticket,
             status_lookup=bad_lookup)


@pytest.mark.parametrize(
    ("handler", "lookup", "parameters"),
    [
        (create_ticket, lambda request_id, title, priority=3: None, None),
        (create_ticket, lambda request_id, **_: None, None),
        (create_ticket, lambda **arguments: None, None),
        (create_ticket, lambda request_id, title, priority=3, note="": None, None),  # more is fine
        (create_ticket, lambda *, request_id, title, priority=0: None, None),
        (open_handler, lambda request_id, **fields: None, None),
        (open_handler, lambda request_id, title=None: None,
         {"type": "object", "properties": {"request_id": {"type": "string"},
                                           "title": {"type": "string"}},
          "required": ["request_id"], "additionalProperties": False}),
    ],
)
def test_a_lookup_that_takes_every_call_of_the_tool_is_accepted(handler, lookup, parameters):
    spec = make(name="create_ticket", effect="reversible_write", handler=handler,
                status_lookup=lookup, parameters=parameters)
    assert ToolRegistry([spec]).get("create_ticket") is not None


def test_the_checked_lookup_is_the_one_the_runner_calls_after_a_timeout():
    """A lookup accepted at spec time answers at run time: the write lands, then hangs past
    its timeout; the lookup settles it, with one real handler call."""
    landed: dict[str, dict] = {}

    def write(request_id: str, title: str) -> dict:
        """Open a ticket."""
        landed[request_id] = {"ticket": f"T-{request_id}", "title": title}
        return landed[request_id]

    def lookup(request_id: str, **_: object) -> dict | None:
        return landed.get(request_id)

    with faults.commit_then_timeout(write) as hung:
        spec = ToolSpec("create_ticket", "Open a ticket.", "reversible_write", 0.2, 3, 300, hung,
                        status_lookup=lookup)
        result = ToolRunner(ToolRegistry([spec]), sleep=no_wait).call(
            "create_ticket", {"request_id": "r-1", "title": "Printer"})
    assert result["ok"] is True and hung.calls == 1 and hung.commits == 1
    assert '"ticket": "T-r-1"' in result["data"]


# ------------------------------------------------------------------ the no-lookup warning


def reversible(name: str = "save_note", **extra) -> ToolSpec:
    return ToolSpec(name, "Save a note.", "reversible_write", 1.0, 3, 100,
                    lambda text: text, **extra)


def warnings_of(caplog) -> list[logging.LogRecord]:
    """The registry's own warnings: a handler of an earlier test that finishes late on its
    worker thread may log meanwhile (caplog hears every thread), and is not the registry's."""
    return [r for r in caplog.records if r.name == "agentkit" and r.levelno >= logging.WARNING
            and r.module == "registry"]


def test_a_reversible_write_without_a_lookup_is_said_once_when_it_is_registered(caplog):
    spec = reversible()
    with caplog.at_level(logging.DEBUG, logger="agentkit"):
        assert warnings_of(caplog) == []  # making the spec says nothing
        registered = ToolRegistry([spec]).get("save_note")
        assert registered is not None
        said = warnings_of(caplog)
        ToolRegistry([spec])  # the same spec again
        ToolRegistry([registered])  # the registry's copy of it
    assert len(said) == 1 and warnings_of(caplog) == said
    message = said[0].getMessage()
    assert message.startswith("save_note is a reversible_write with no status_lookup: ")
    assert "outcome_unknown" in message and "store.release(key)" in message
    assert said[0].exc_info is None


def test_each_spec_is_said_once_and_only_reversible_writes_without_a_lookup(caplog):
    with caplog.at_level(logging.DEBUG, logger="agentkit"):
        ToolRegistry([
            reversible("with_lookup", status_lookup=lambda text: None),
            make(),  # a read
            make(name="send", effect="irreversible_write", max_attempts=1),
            reversible("first"),
            reversible("second"),
        ])
    assert [r.getMessage().split()[0] for r in warnings_of(caplog)] == ["first", "second"]


def test_the_warning_reaches_no_stderr_unless_the_host_configures_logging():
    """Notebooks are compared by nbval, stderr included: the ``agentkit`` logger's
    NullHandler keeps the registration warning out of a process that set up no logging."""
    code = ("import agentkit\n"
            "agentkit.ToolRegistry([agentkit.ToolSpec('save_note', 'Save a note.',"
            " 'reversible_write', 1.0, 3, 100, lambda text: text)])\n")
    quiet = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60, check=True)
    assert quiet.stderr == ""
    configured = subprocess.run(
        [sys.executable, "-c", "import logging; logging.basicConfig()\n" + code],
        capture_output=True, text=True, timeout=60, check=True)
    assert configured.stderr.startswith(
        "WARNING:agentkit:save_note is a reversible_write with no status_lookup")


# ------------------------------------------------------------------ what type checkers see


@pytest.mark.parametrize(("path", "cls"), [("agentkit/boundary/spec.py", ToolSpec),
                                           ("agentkit/boundary/context.py", CallContext)])
def test_the_init_type_checkers_see_matches_the_fields(path, cls):
    """The ``__init__`` declared under ``TYPE_CHECKING`` (wider argument types: an effect's
    plain name, any set of scopes) has the dataclass's fields, in order, with their defaults."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    body = next(node for node in tree.body if isinstance(node, ast.ClassDef)
                and node.name == cls.__name__).body
    guarded = next(node for node in body if isinstance(node, ast.If)
                   and ast.unparse(node.test) == "TYPE_CHECKING")
    init = next(node for node in guarded.body if isinstance(node, ast.FunctionDef))
    assert init.name == "__init__"
    names = [a.arg for a in init.args.args][1:]
    fields = dataclasses.fields(cls)
    assert names == [f.name for f in fields]
    defaults = dict(zip(names[len(names) - len(init.args.defaults):], init.args.defaults,
                        strict=True))
    for f in fields:
        has_default = (f.default is not dataclasses.MISSING
                       or f.default_factory is not dataclasses.MISSING)
        assert (f.name in defaults) == has_default, f.name
        if has_default:
            declared = eval(compile(ast.Expression(defaults[f.name]), path, "eval"))
            actual = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            assert declared == actual and type(declared) is type(actual), f.name


def test_a_made_spec_holds_the_effect_and_a_frozenset_whatever_it_was_given():
    spec = make(effect="reversible_write", required_scopes={"notes:write"})
    assert spec.effect is Effect.REVERSIBLE_WRITE
    assert spec.required_scopes == frozenset({"notes:write"})
    assert type(spec.required_scopes) is frozenset
    assert make(required_scopes=["a", "b", "a"]).required_scopes == frozenset({"a", "b"})
    assert make(required_scopes="notes:read").required_scopes == frozenset({"notes:read"})
    assert CallContext(scopes={"a"}).scopes == frozenset({"a"})
    assert type(CallContext(scopes=["a"]).scopes) is frozenset
