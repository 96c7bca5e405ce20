"""The demo tools: one of each side-effect level, and a ready-made registry that holds them.

==========================  =====================  ====================================
tool                        effect                 what it shows
==========================  =====================  ====================================
``search_local_sources``    read                   schema limits (``limit`` 1..10)
``get_document``            read                   a stable error for an unknown id
``save_brief``              reversible_write       idempotency key, status lookup,
                                                   atomic write, workspace policy
``send_message``            irreversible_write     approval before anything is sent
==========================  =====================  ====================================

Handlers are plain methods of :class:`DemoTools`, which owns the workspace folder and the
corpus; nothing here knows about the runner. ``make_demo_registry(..., wrap=...)`` lets a test
or the fault injector put a wrapper around each handler by tool name (a call counter, a
simulated disconnect) while the schema the model sees is still derived from the plain
handler, so no wrapper can change it.

Paths are checked twice: by :func:`workspace_policy` in the registry, before the handler is
ever submitted (a traversal attempt makes 0 handler calls), and again by the handler itself,
because a handler must not trust that it is only reached through one registry.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import threading
import unicodedata
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any

from agentkit.boundary.authorization import Policy
from agentkit.boundary.context import CallContext
from agentkit.boundary.errors import InvalidInput
from agentkit.boundary.registry import ToolRegistry
from agentkit.boundary.schema import derive_parameters
from agentkit.boundary.spec import Effect, ToolSpec
from agentkit.demo.corpus import Corpus

OUTBOX = "outbox.jsonl"

Wrap = Callable[[str, Callable[..., Any]], Callable[..., Any]]


#: What the model is told when it asks ``get_document`` for an id the corpus does not hold.
UNKNOWN_DOCUMENT = "no note has this id: call search_local_sources and pass an id it returned"


class UnknownDocument(InvalidInput, LookupError):
    """``get_document`` was asked for an id the corpus does not hold: the model's input was
    wrong, not the tool. Through the boundary this is ``invalid_arguments`` (not retryable:
    asking again with the same id cannot help) with :data:`UNKNOWN_DOCUMENT` as ``detail``,
    which tells the model to search for a valid id instead of guessing.
    """

    def __init__(self, doc_id: str) -> None:
        super().__init__(UNKNOWN_DOCUMENT)
        self.doc_id = doc_id  # for the log and the operator; never in the model's detail


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------- paths


#: Files of the workspace that a model-chosen path may never name (in any letter case): the
#: outbox ``send_message`` appends to, and the files of a store kept beside it.
RESERVED_NAMES = frozenset({OUTBOX})
RESERVED_SUFFIXES = (".sqlite", ".sqlite3", ".db", "-wal", "-shm", "-journal")

#: Characters a path may not hold: controls, and the invisible format characters that make a
#: name read differently from what it is (bidirectional overrides such as U+202E, zero-width
#: spaces and joiners, the byte-order mark), plus line separators and unassigned code points.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def workspace_path(workspace: str | Path, path: Any) -> Path:
    """The real location of ``path`` inside ``workspace``, or ``PermissionError``.

    Refused: a non-str or empty path, absolute paths (POSIX or Windows style), backslashes,
    any ``..`` component (even one that would stay inside: a path should say where it goes),
    a path naming the workspace itself, anything whose symlinks resolve outside, names that
    would overwrite the workspace's own files (the outbox, a store's files: any letter case,
    see :data:`RESERVED_NAMES`), hidden names (a leading ``.``, as the atomic write's temp
    files have), and names holding control, bidirectional-override or zero-width characters.
    A check-then-write gap remains (a symlink swapped in between): the workspace is assumed
    to be written by this process only, as in the demo.
    """
    if not isinstance(path, str) or not path.strip():
        raise PermissionError("path must be a non-empty relative path")
    path = str.__str__(path)
    if any(unicodedata.category(char) in _REFUSED_CATEGORIES for char in path):
        raise PermissionError("path must not hold control, bidirectional or zero-width characters")
    if "\\" in path or path.startswith("/") or (len(path) > 1 and path[1] == ":"):
        raise PermissionError("path must be relative, with '/' separators")
    parts = PurePosixPath(path).parts
    if ".." in parts:
        raise PermissionError("path must not contain '..'")
    if not parts or path.endswith("/"):
        raise PermissionError("path must name a file")
    for part in parts:
        if part.startswith("."):
            raise PermissionError("path must not name hidden files")
    name = parts[-1].rstrip(" .").casefold()
    if name in RESERVED_NAMES or name.endswith(RESERVED_SUFFIXES):
        raise PermissionError("path names a file the workspace reserves")
    root = Path(workspace).resolve()
    target = (root / Path(*parts)).resolve()
    if target == root or not target.is_relative_to(root):
        raise PermissionError("path resolves outside the workspace")
    return target


def workspace_policy(workspace: str | Path, *, arguments: tuple[str, ...] = ("path",)) -> Policy:
    """A registry policy: any call whose ``path`` argument leaves ``workspace`` is refused
    (``forbidden``) before its handler runs. Other arguments can be named in ``arguments``."""
    root = Path(workspace)

    def inside_workspace(spec: ToolSpec, args: dict[str, Any], context: CallContext) -> str | None:
        for name in arguments:
            if name in args:
                try:
                    workspace_path(root, args[name])
                except PermissionError as exc:
                    return f"{name}: {exc}"
        return None

    return inside_workspace


def atomic_write_text(target: Path, content: str) -> None:
    """Write so that a reader (or a status lookup after a crash) sees the old file or the new
    one, never half of it: temp file in the same folder, fsync, rename, fsync the folder."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    _fsync_dir(target.parent)


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable (POSIX; a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def outbox_lines(workspace: str | Path) -> int:
    """How many messages ``send_message`` really appended: the count a failure table shows."""
    outbox = Path(workspace) / OUTBOX
    if not outbox.exists():
        return 0
    with outbox.open("rb") as handle:
        return sum(1 for _ in handle)


def brief_key(context: CallContext, arguments: dict[str, Any]) -> str:
    """The chapter's key for ``save_brief``: the intent is "this task saves this content at
    this path", so the content enters by its hash and a retry computes the same key again.
    It is *content-addressed* (docs/design.md#key-designs): other content at the same path is
    another intent and runs; the same content replays; no conflict can arise.
    The task is the runner's :class:`CallContext`, never an argument: the model must not
    choose the namespace of its own keys."""
    return f"{context.task_id}:{arguments['path']}:{sha256_text(arguments['content'])}"


# --------------------------------------------------------------------------- the tools


class DemoTools:
    """The handlers, bound to one workspace folder and one corpus."""

    def __init__(self, workspace: str | Path, corpus: Corpus | None = None) -> None:
        self.workspace = Path(workspace)
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.corpus = corpus if corpus is not None else Corpus.load()
        self._outbox_lock = threading.Lock()

    def search_local_sources(self, query: str, limit: int = 3) -> list[dict[str, str]]:
        """Ranked hits ``{"id", "title", "snippet"}``, best first."""
        return self.corpus.search(query, limit)

    def get_document(self, doc_id: str) -> dict[str, str]:
        """The whole note; an unknown id raises :class:`UnknownDocument` (``invalid_arguments``)."""
        try:
            return self.corpus.get(doc_id)
        except KeyError:
            raise UnknownDocument(doc_id) from None

    def save_brief(self, path: str, content: str) -> dict[str, Any]:
        """Write ``content`` to ``path`` in the workspace, atomically; returns the receipt."""
        target = workspace_path(self.workspace, path)
        atomic_write_text(target, content)
        return self._receipt(path, content)

    def brief_status(self, path: str, content: str) -> dict[str, Any] | None:
        """The status lookup of ``save_brief``: the receipt if the file holds exactly this
        content (the write took effect), None if not. Raises if it cannot tell (unknown)."""
        target = workspace_path(self.workspace, path)
        try:
            data = target.read_bytes()
        except FileNotFoundError:
            return None
        if hashlib.sha256(data).hexdigest() != sha256_text(content):
            return None
        return self._receipt(path, content)

    def send_message(self, to: str, body: str) -> dict[str, Any]:
        """Append one JSON line to the outbox and make it durable before reporting "sent"."""
        line = json.dumps({"to": to, "body": body}, ensure_ascii=False) + "\n"
        with self._outbox_lock:
            number = outbox_lines(self.workspace) + 1
            with (self.workspace / OUTBOX).open("a", encoding="utf-8", newline="") as handle:
                handle.write(line)
                handle.flush()
                os.fsync(handle.fileno())
        return {"sent": True, "to": to, "line": number}

    def _receipt(self, path: str, content: str) -> dict[str, Any]:
        return {
            "path": str(PurePosixPath(path)),
            "sha256": sha256_text(content),
            "chars": len(content),
        }


# --------------------------------------------------------------------------- the registry

DESCRIPTIONS = {
    "search_local_sources": (
        "Search the local library of notes on building reliable tool-calling agents. "
        "Use it first, to find which notes answer the question. Returns up to `limit` hits, "
        "best first, each with an `id` (pass it to get_document), a `title` and a short "
        "`snippet`. An empty list means nothing matched: rephrase with other keywords."
    ),
    "get_document": (
        "Read one note of the local library in full, by the `id` that search_local_sources "
        "returned. Use it before answering, to quote and cite the note. An id that does not "
        "exist fails with invalid_arguments: search again rather than guessing ids."
    ),
    "save_brief": (
        "Save a short Markdown brief to a file in the task's workspace, replacing any file "
        "at that path. `path` is relative to the workspace (for example 'briefs/x.md'); "
        "absolute paths and '..' are refused. Saving the same content again is safe: it is "
        "done once. Returns a receipt with the path, the content's sha256 and its length."
    ),
    "send_message": (
        "Send a message to a person. This cannot be undone, so every call first waits for a "
        "human to approve it: the first result is approval_required with an approval_id. "
        "Do not send the same message again while it waits; tell the user it needs approval."
    ),
}


def _parameters(handler: Callable[..., Any], **rules: dict[str, Any]) -> dict[str, Any]:
    """The schema derived from the handler's signature, plus descriptions and limits per field.
    The signature stays the one source of truth for names, types and which are required."""
    schema = derive_parameters(handler)
    for name, extra in rules.items():
        schema["properties"][name].update(extra)  # KeyError: no such parameter
    return schema


def demo_specs(tools: DemoTools, wrap: Wrap | None = None) -> list[ToolSpec]:
    """The four specs over ``tools``; ``wrap(name, handler)`` wraps each handler."""
    wrapped = (lambda name, handler: handler) if wrap is None else wrap

    def spec(name: str, handler: Callable[..., Any], effect: Effect, max_attempts: int,
             parameters: dict[str, Any], **extra: Any) -> ToolSpec:
        return ToolSpec(
            name, DESCRIPTIONS[name], effect, 2.0, max_attempts, 2000, wrapped(name, handler),
            parameters=parameters, **extra,
        )

    return [
        spec("search_local_sources", tools.search_local_sources, Effect.READ, 3,
             _parameters(tools.search_local_sources,
                         query={"description": "Keywords or a question.", "minLength": 1,
                                "maxLength": 500},
                         limit={"description": "How many hits, 1 to 10.", "minimum": 1,
                                "maximum": 10})),
        spec("get_document", tools.get_document, Effect.READ, 3,
             _parameters(tools.get_document,
                         doc_id={"description": "A note id from search_local_sources."})),
        spec("save_brief", tools.save_brief, Effect.REVERSIBLE_WRITE, 3,
             _parameters(tools.save_brief,
                         path={"description": "File path relative to the workspace."},
                         content={"description": "The brief, in Markdown."}),
             status_lookup=tools.brief_status, idempotency_key=brief_key),
        spec("send_message", tools.send_message, Effect.IRREVERSIBLE_WRITE, 1,
             _parameters(tools.send_message,
                         to={"description": "Recipient name or address.", "minLength": 1},
                         body={"description": "The message text."})),
    ]


def make_demo_registry(
    workspace: str | Path, corpus: Corpus | None = None, *, wrap: Wrap | None = None
) -> ToolRegistry:
    """A registry of the four demo tools writing into ``workspace`` (created if missing),
    with :func:`workspace_policy` installed. ``wrap(name, handler) -> handler`` is applied to
    each handler (not to the status lookup); the schemas do not depend on it."""
    tools = DemoTools(workspace, corpus)
    return ToolRegistry(demo_specs(tools, wrap), policies=[workspace_policy(tools.workspace)])
