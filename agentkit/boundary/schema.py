"""Schema check: the first stage. Arguments the model sent are checked before anything runs.

Validation path: ``fastjsonschema`` compiles each tool's JSON Schema (draft-07) into a plain
Python function once, at registration, so the check on every call costs microseconds and
nothing is parsed per call. It is pure Python with no dependencies and imports in a few
milliseconds, which keeps ``import agentkit`` light; ``jsonschema`` with its format checkers
can cost a second at import in a Jupyter environment. pydantic would make us mirror every
schema as a model class, while tools (and MCP) speak JSON Schema natively.

When a tool gives no schema, one is derived from the handler's signature and type hints:
a learner writes a typed function and gets the schema the model sees for free.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import types
import typing
from collections.abc import Callable
from typing import Any, Literal, Union

import fastjsonschema

from agentkit.boundary.canonical import encoder
from agentkit.boundary.errors import ErrorCode, failure

log = logging.getLogger("agentkit")

Validator = Callable[[Any], Any]

_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
    type(None): {"type": "null"},
}


# ---------------------------------------------------------------- derivation

def derive_parameters(handler: Callable[..., Any]) -> dict[str, Any]:
    """The JSON Schema of a handler's keyword arguments, from its signature and type hints.

    ``functools.wraps`` wrappers are followed to the function that declares the arguments.
    Parameters with defaults are optional; no extra properties are allowed unless the
    handler takes ``**kwargs``.
    """
    target = inspect.unwrap(handler)
    signature = inspect.signature(target)
    # a callable object's hints are its class's __call__'s; its name, its class's
    annotated = (target if inspect.isroutine(target) or inspect.isclass(target)
                 else type(target).__call__)
    qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
    try:
        hints = typing.get_type_hints(annotated, include_extras=True)
    except Exception as exc:  # an unresolvable forward reference is the author's bug
        raise ValueError(f"cannot resolve the type hints of {qualname}: {exc}") from None
    properties: dict[str, Any] = {}
    required: list[str] = []
    extra_allowed = False
    for name, param in signature.parameters.items():
        if param.kind is param.VAR_KEYWORD:
            extra_allowed = True
            continue
        if param.kind in (param.VAR_POSITIONAL, param.POSITIONAL_ONLY):
            raise ValueError(
                f"parameter {name!r} of {qualname} cannot be passed by keyword; "
                "tool handlers take keyword arguments"
            )
        prop = type_schema(hints.get(name, Any)) if name in hints else {}
        if param.default is param.empty:
            required.append(name)
        else:
            if param.default is None:  # a None default accepts null (3.10 hints say so too)
                prop = _nullable(prop)
            if _is_json_value(param.default):
                prop = {**prop, "default": param.default}
        properties[name] = prop
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = extra_allowed
    return schema


def type_schema(tp: Any) -> dict[str, Any]:
    """The JSON Schema of one type hint (str, int, float, bool, list[X], dict, Literal, Optional)."""
    if tp is Any or tp is inspect.Parameter.empty:
        return {}
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        inner = type_schema(args[0])
        notes = [a for a in args[1:] if isinstance(a, str)]
        return {**inner, "description": " ".join(notes)} if notes else inner
    if tp in _SCALARS:
        return dict(_SCALARS[tp])
    if origin is Literal:
        return {"enum": list(args)}
    if origin is Union or (hasattr(types, "UnionType") and origin is types.UnionType):
        options = [type_schema(a) for a in args]
        if any(o == {} for o in options):
            return {}
        rest = [o for o in options if o != {"type": "null"}]
        if len(rest) == 1 and len(options) == 2:
            return _nullable(rest[0])
        return {"anyOf": options}
    if tp in (list, tuple, set, frozenset) or origin in (list, tuple, set, frozenset, typing.Sequence):
        schema: dict[str, Any] = {"type": "array"}
        homogeneous = origin is tuple and len(args) == 2 and args[1] is Ellipsis  # tuple[X, ...]
        if (args and origin is not tuple) or homogeneous:
            schema["items"] = type_schema(args[0])
        return schema
    if tp is dict or origin in (dict, typing.Mapping):
        schema = {"type": "object"}
        if len(args) == 2 and args[1] is not Any:
            schema["additionalProperties"] = type_schema(args[1])
        return schema
    raise ValueError(f"no JSON Schema for type hint {tp!r}; give the spec explicit parameters")


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``X`` or null. ``{"type": [X, "null"]}`` rather than ``anyOf``, so that an error points
    inside ``X`` (at an item, say) instead of at the union."""
    kind = schema.get("type")
    if isinstance(kind, str):
        return {**schema, "type": [kind, "null"]} if kind != "null" else schema
    if isinstance(kind, list):
        return schema if "null" in kind else {**schema, "type": [*kind, "null"]}
    if "enum" in schema:
        return schema if None in schema["enum"] else {**schema, "enum": [*schema["enum"], None]}
    if not schema:
        return schema  # anything, null included
    return {"anyOf": [schema, {"type": "null"}]}


def _is_json_value(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


# ---------------------------------------------------------------- compilation

def compile_validator(schema: dict[str, Any]) -> Validator:
    """Compile a schema once; a schema that is not valid JSON Schema is refused here."""
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        raise ValueError("parameters must be a JSON Schema of type 'object'")
    try:
        return fastjsonschema.compile(schema)
    except fastjsonschema.JsonSchemaDefinitionException as exc:
        raise ValueError(f"parameters is not a valid JSON Schema: {exc}") from None


# ---------------------------------------------------------------- the check

#: How deeply arguments may nest; deeper input is refused before anything recurses into it.
MAX_DEPTH = 100


class _NotJSON(Exception):
    """Arguments hold something that is not a plain JSON value."""


def check_arguments(
    arguments: Any, schema: dict[str, Any], validator: Validator, max_chars: int
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Return ``(arguments, None)`` when they may reach the handler, else ``(None, failure)``.

    The arguments handed on are a fresh copy made of plain JSON values only: the handler sees
    exactly what a model could have sent, and the caller's object cannot change under it.
    The copy is made through the base types' own methods, so a dict or str subclass whose
    ``__eq__``, ``__hash__``, ``items`` or ``__str__`` misbehaves never runs its code here.
    An integral float where the schema wants an integer (``2.0``) reaches the handler as
    ``2``; text with a lone surrogate (not encodable as UTF-8) is refused.
    """
    if not isinstance(arguments, dict):
        return None, _invalid("arguments must be a JSON object")
    integral: list[bool] = []
    plain = _flat_copy(arguments, max_chars) if type(arguments) is dict else None
    if plain is None:
        try:
            plain = _plain(arguments, 0, integral)
        except _NotJSON as exc:
            return None, _invalid(str(exc))
        except Exception:  # a value that lies about its type (a __class__ property, say)
            return None, _invalid(_NOT_JSON)
        try:
            text = _encode(plain)
        except (ValueError, RecursionError):  # an int too long for str (sys.get_int_max_str_digits)
            return None, _invalid("arguments hold a number too long to write as JSON text")
        if len(text) > max_chars:
            return None, _invalid(f"arguments are {len(text)} characters of JSON; the limit is {max_chars}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return None, _invalid("arguments must be valid Unicode text (a lone surrogate was sent)")
    try:
        validator(plain)
    except fastjsonschema.JsonSchemaValueException as exc:
        return None, _invalid(_describe(exc, schema))
    except Exception:  # the check itself cannot evaluate these values (10**400 % 0.5, say)
        log.debug("the schema check raised on these arguments", exc_info=True)
        return None, _invalid("arguments hold a value the schema's rules cannot be checked on")
    if not integral:
        return plain, None  # nothing to coerce: no need to walk the schema
    coerced = _coerce_integers(plain, schema)
    assert isinstance(coerced, dict)
    return coerced, None


#: One encoder for every call, the C encoder called directly. The copy :func:`_plain` makes
#: is acyclic and at most :data:`MAX_DEPTH` deep, so no cycle check is needed.
_encode = encoder(check_circular=False)

_NOT_JSON = "arguments must hold only JSON values"


#: The longest JSON text of a value :func:`_flat_copy` takes other than a str: an int below
#: 2**63 in absolute value (``-9223372036854775807``), ``false``.
_SCALAR_CHARS = 20


def _flat_copy(arguments: dict[str, Any], max_chars: int) -> dict[str, Any] | None:
    """The common case in one loop: a plain dict whose keys are ASCII str and whose values
    are ASCII str, None, bool or ints below 2**63, every one of the exact type. Returns a copy
    (the same one :func:`_plain` makes) when their JSON text surely fits in ``max_chars``
    (counted for the worst case: every character escaped as ``\\uXXXX``), else None: then
    the full check decides. ASCII text holds no lone surrogate, and nothing here is an
    integral float, so neither needs a look."""
    size = 2
    for key, value in dict.items(arguments):
        if type(key) is not str or not key.isascii():
            return None
        kind = type(value)
        if kind is str:
            if not value.isascii():
                return None
            size += 6 * (len(key) + len(value)) + 8
        elif value is None or kind is bool or (kind is int and value.bit_length() < 64):
            size += 6 * len(key) + 6 + _SCALAR_CHARS
        else:
            return None
    if size > max_chars:
        return None
    return dict(arguments)


def _plain(value: Any, depth: int, integral: list[bool]) -> Any:
    """A fresh copy of ``value`` built from exact JSON types, or :class:`_NotJSON`. A float
    such as ``2.0`` (the only value :func:`_coerce_integers` may change) is noted in
    ``integral``, so that no second walk is needed to know whether there is one."""
    if value is None or value is True or value is False:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        number = float.__float__(value)
        if not math.isfinite(number):
            raise _NotJSON(_NOT_JSON)
        if number.is_integer():
            integral.append(True)
        return number
    if depth >= MAX_DEPTH:
        raise _NotJSON(f"arguments must not nest deeper than {MAX_DEPTH} levels")
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        items = list(dict.items(value))
        for key, item in items:
            if not isinstance(key, str):
                raise _NotJSON(_NOT_JSON)
            out[str.__str__(key)] = _plain(item, depth + 1, integral)
        if len(out) != len(items):  # two keys that only differed by their class
            raise _NotJSON(_NOT_JSON)
        return out
    if isinstance(value, list):
        return [_plain(item, depth + 1, integral) for item in list.__iter__(value)]
    raise _NotJSON(_NOT_JSON)


def _coerce_integers(value: Any, schema: Any) -> Any:
    """Integral floats become ints wherever the schema wants an integer (and not a number)."""
    if not isinstance(schema, dict):
        return value
    if type(value) is float and value.is_integer() and _wants_integer(schema):
        return int(value)
    if isinstance(value, dict):
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        extra = schema.get("additionalProperties")
        for key in value:
            sub = properties.get(key, extra if key not in properties else None)
            value[key] = _coerce_integers(value[key], sub)
    elif isinstance(value, list):
        items = schema.get("items")
        prefix = schema.get("prefixItems")
        if isinstance(items, list):  # draft-07 tuple form
            prefix, items = items, schema.get("additionalItems")
        prefix = prefix if isinstance(prefix, list) else []
        for index, item in enumerate(value):
            sub = prefix[index] if index < len(prefix) else items
            value[index] = _coerce_integers(item, sub)
    for keyword in ("allOf", "anyOf", "oneOf"):
        branches = schema.get(keyword)
        if not isinstance(branches, list):
            continue
        for branch in branches:
            # A scalar is decided by the node's own types (above); branches only reach inside.
            if keyword == "allOf" or isinstance(value, (dict, list)):
                value = _coerce_integers(value, branch)
    return value


def _wants_integer(schema: dict[str, Any]) -> bool:
    kinds = _types_of(schema)
    if kinds is not None and "integer" in kinds and "number" not in kinds:
        return True
    branches = schema.get("allOf")
    return isinstance(branches, list) and any(
        isinstance(b, dict) and _wants_integer(b) for b in branches
    )


def _types_of(schema: Any) -> set[str] | None:
    """The JSON types a schema node admits, when it says (``type``, or ``anyOf``/``oneOf``)."""
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return {k for k in kind if isinstance(k, str)}
    for keyword in ("anyOf", "oneOf"):
        branches = schema.get(keyword)
        if isinstance(branches, list) and branches:
            found: set[str] = set()
            for branch in branches:
                kinds = _types_of(branch)
                if kinds is None:
                    return None
                found |= kinds
            return found
    return None


def _invalid(detail: str) -> dict[str, Any]:
    return failure(ErrorCode.INVALID_ARGUMENTS, detail=detail)


def _describe(exc: fastjsonschema.JsonSchemaValueException, schema: dict[str, Any]) -> str:
    """A safe sentence naming the field and the rule; never the value the model sent."""
    steps = list(exc.path or [])[1:]  # path[0] is fastjsonschema's name for the root
    field = _field_name(steps, schema)
    rule, definition = exc.rule, exc.rule_definition
    if rule == "required":
        present = exc.value if isinstance(exc.value, dict) else {}
        missing = [r for r in definition if r not in present]
        names = ", ".join(repr(m) for m in missing) or "a field"
        where = f" in {field}" if field else ""
        return f"missing required field {names}{where}"
    if rule == "additionalProperties":
        props = sorted((exc.definition or {}).get("properties", {}))
        allowed = ", ".join(props) if props else "none"
        where = f" in {field}" if field else ""
        return f"unexpected field{where}; allowed fields: {allowed}"
    subject = f"field {field!r}" if field else "arguments"
    if rule == "type":
        kinds = definition if isinstance(definition, str) else " or ".join(definition)
        return f"{subject} must be of type {kinds}"
    if rule == "enum":
        return f"{subject} must be one of: {', '.join(json.dumps(v) for v in definition)}"
    if isinstance(definition, (int, float, str, bool)) and not (
        isinstance(definition, float) and math.isnan(definition)
    ):
        return f"{subject} breaks the rule {rule}={json.dumps(definition)}"
    return f"{subject} breaks the rule {rule}"


def _field_name(steps: list[Any], schema: Any) -> str:
    """The dotted path of the failing field, as the schema names it.

    The path is walked through the schema: a step is shown only when the schema names it (a
    property) or it is a position in an array. A key the schema does not name is model input
    (digits, Unicode digits or anything else), so the path stops at its parent and shows
    ``*`` for it: no key or value from the arguments is ever echoed.
    """
    out = ""
    node = schema
    for raw in steps:
        step = str(raw)
        named = _property(node, step)
        if named is not None:
            out += f".{step}" if out else step
            node = named
        elif step.isascii() and step.isdigit() and _array_items(node) is not None:
            out += f"[{step}]"
            node = _array_items(node)
        else:
            return f"{out}.*" if out else "*"
    return out


def _alternatives(node: Any) -> list[dict[str, Any]]:
    """The node and the branches of its ``anyOf``/``oneOf``/``allOf``, one level deep."""
    if not isinstance(node, dict):
        return []
    found = [node]
    for keyword in ("anyOf", "oneOf", "allOf"):
        branches = node.get(keyword)
        if isinstance(branches, list):
            found.extend(b for b in branches if isinstance(b, dict))
    return found


def _property(node: Any, name: str) -> Any:
    for option in _alternatives(node):
        properties = option.get("properties")
        if isinstance(properties, dict) and name in properties:
            return properties[name]
    return None


def _array_items(node: Any) -> Any:
    """The item schema when the node can only be an array (so a digit step is a position)."""
    for option in _alternatives(node):
        kinds = _types_of(option)
        if kinds is not None and "array" in kinds and kinds <= {"array", "null"}:
            items = option.get("items")
            return items if isinstance(items, dict) else {}
    return None
