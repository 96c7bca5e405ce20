"""The LangGraph face: the registry's tools as one ``langgraph.prebuilt.ToolNode``.

    >>> from agentkit.faces.langgraph import tool_node
    >>> graph.add_node("tools", tool_node(runner))

The node's ``wrap_tool_call``/``awrap_tool_call`` send every tool call to the runner (``call``
or ``acall``) with the model's tool-call id as the runner's ``call_id``; the node's own
execution and error handling are never used, so agentkit's policy is the only one (a
``ToolNode`` has no timeout, and LangChain's retry middleware would retry any exception). The
model reads a ``ToolMessage``: the result's ``data``, or the JSON text of a failed result with
``status="error"`` — a normal tool result, never an exception that stops the graph.

**Each thread is a conversation of its own.** A call runs under the runner's task for its
graph's ``thread_id`` (:func:`~agentkit.faces.framework.task_runner`: the task id is the
thread id), so its idempotency keys and approvals are its thread's: two threads asking for the
same refund each get it, once, and each approval is asked in its own thread; the same thread
again (a resume, a re-run node, a new process on a durable checkpointer) finds its own. A call
with no thread (a graph without a checkpointer, a tool invoked on its own) runs under the
runner's own task id, which serves one conversation at a time.

An irreversible write asks the runner first, as every other face does: an answer that needs
nobody (a settled approval's result, ``budget_exhausted`` with the budget spent, an
invalid call) is the model's at once; ``approval_required`` calls
:func:`langgraph.types.interrupt` (the graph needs a checkpointer): the graph stops with the
pending call (tool, arguments, tool_call_id), a person decides, and
``graph.invoke(Command(resume=True | False), config)`` resumes it. ``True`` (exactly)
approves agentkit's approval of exactly these arguments; anything else denies it, and the
model reads agentkit's ``forbidden`` (or, for a call settled meanwhile, what it settled to).

**Each answer goes to the call it was shown for.** LangGraph hands a re-run node its stored
answers by position (the n-th ``interrupt()`` of the node gets the n-th answer), and which
calls still need a person changes between re-runs (the budget runs out, a call is settled
elsewhere, a rejected call needs no one any more). So the node keeps its own *ask log* in the
runner's store: position n of this node's task (its thread and checkpoint namespace) was
shown for this tool call. A re-run reads every stored answer through the log, in its order,
before any call decides; a call asks anew only at the end of the log, one question per run.
The store must therefore be as durable as the checkpointer (a durable checkpointer with the
in-memory store loses the log on restart: a stored answer whose call cannot be known is then
never acted on, and the call answers ``approval_required``, its approval left for a person).

**An approved write runs once, and survives its host.** LangGraph re-runs the whole node from
its top on resume, and a host may cancel a resume (``asyncio.wait_for``, the graph's
``step_timeout``, one ``asyncio.run`` per request) while the approved write runs. The write is
settled on a thread of its own that no cancellation reaches; a re-run of the node (in this
process) joins it and reads its receipt, a later process finds the approval settled (or, if
the process died mid-write, the runner recovers it through the status lookup). A read in the
same node may run again. On the async path, as on the sync one, the node's irreversible calls
decide one at a time in the model's order, each once the one before is settled, and a run
that stops on a question (or fails) ends only once every call of it has ended: LangGraph's
``asyncio.gather`` would pass the question on at once, so a host that ends with it (one
process per request) would end an approved write midway, and its checkpoint would already
wait on the next question. Importing this module imports LangGraph (extra
``agentkit[langgraph]``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future
from typing import Any

from agentkit.boundary.canonical import canonical_json
from agentkit.boundary.errors import ErrorCode
from agentkit.boundary.spec import Effect, ToolSpec
from agentkit.faces.framework import MissingFramework, model_text, task_runner
from agentkit.policy.runner import ToolRunner

try:
    from langchain_core.messages import ToolMessage
    from langchain_core.runnables import RunnableConfig, ensure_config
    from langchain_core.tools import BaseTool, StructuredTool
    from langgraph.errors import GraphInterrupt
    from langgraph.prebuilt import ToolNode
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.types import Command, Interrupt, interrupt
except ModuleNotFoundError as missing:  # one clear line in a notebook, not a traceback
    raise MissingFramework('langgraph', 'langgraph', missing) from None

__all__ = ["tool_node", "tools"]

log = logging.getLogger("agentkit")

_APPROVAL_REQUIRED = ErrorCode.APPROVAL_REQUIRED.value
_IN_PROGRESS = ErrorCode.IN_PROGRESS.value


def tool_node(runner: ToolRunner, *, name: str = "tools") -> ToolNode:
    """A ``ToolNode`` whose every call goes through ``runner``."""
    settlements = _Settlements()

    def wrap(request: ToolCallRequest,
             execute: Callable[[ToolCallRequest], ToolMessage | Command[Any]]) -> ToolMessage:
        call = request.tool_call
        tool, call_id = call["name"], call.get("id")
        task = task_runner(runner, _thread(_config(request)))  # the conversation's own keys
        result = task.call(tool, call["args"], call_id=call_id)
        if _irreversible(runner, tool):
            asked = _Asked(request, result)
            if result.get("error") == _IN_PROGRESS:
                known = settlements.get(asked.key)
                if known is not None:  # this node's own settlement, still under way
                    result = known.result()
            elif result.get("error") == _APPROVAL_REQUIRED:
                answer = _run().answer(asked, _AskLog(runner.store, asked.task))
                result = _settle(task, settlements, asked, answer).result()
        return _message(result, tool, call_id)

    async def awrap(
        request: ToolCallRequest,
        execute: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage:
        call = request.tool_call
        tool, call_id = call["name"], call.get("id")
        task = task_runner(runner, _thread(_config(request)))  # the conversation's own keys
        node = _run()
        with node.one_call():  # the run ends only once every call of it has ended
            if not _irreversible(runner, tool):
                result = await task.acall(tool, call["args"], call_id=call_id)
                return _message(result, tool, call_id)
            # The node's irreversible calls decide in turn, and each keeps its turn until it
            # is settled (as on the sync path): the next one decides, and may stop the run on
            # its question, only once this one's approved write has landed and been recorded.
            async with node.in_model_order():
                result = await task.acall(tool, call["args"], call_id=call_id)
                asked = _Asked(request, result)
                settling: Future[dict[str, Any]] | None = None
                if result.get("error") == _IN_PROGRESS:
                    settling = settlements.get(asked.key)
                elif result.get("error") == _APPROVAL_REQUIRED:
                    book = _AskLog(runner.store, asked.task)
                    answer = await node.aanswer(asked, book)
                    settling = _settle(task, settlements, asked, answer)
                if settling is not None:
                    # asyncio.wrap_future cannot cancel it: a running settlement is never
                    # cancelled (a cancelled wait gives up its turn, not the write)
                    result = await asyncio.wrap_future(settling)
            return _message(result, tool, call_id)

    return _AgentkitToolNode(tools(runner), name=name, handle_tool_errors=False,
                             wrap_tool_call=wrap, awrap_tool_call=awrap)


def tools(runner: ToolRunner) -> list[BaseTool]:
    """The registry's tools as LangChain tools (name, description, JSON Schema), each calling
    the runner: bound to a chat model they describe the tools; invoked outside the node an
    irreversible write only answers ``approval_required`` (nobody approved it). Invoked in a
    graph, a call runs under its thread's task id, as the node's do."""
    return [_tool(runner, spec) for spec in runner.registry]


def _tool(runner: ToolRunner, spec: ToolSpec) -> BaseTool:
    name = spec.name

    # LangChain runs a tool with its config (the graph's, with the thread) as the current one
    def run(**arguments: Any) -> str:
        return model_text(task_runner(runner, _thread(ensure_config())).call(name, arguments))

    async def arun(**arguments: Any) -> str:
        task = task_runner(runner, _thread(ensure_config()))
        return model_text(await task.acall(name, arguments))

    return StructuredTool.from_function(
        func=run, coroutine=arun, name=name, description=spec.description,
        args_schema=dict(spec.parameters or {}),
    )


def _config(request: ToolCallRequest) -> RunnableConfig:
    """The graph's config of this tool call (empty outside a graph)."""
    runtime = request.runtime
    return (runtime.config if runtime is not None else None) or {}


def _thread(config: RunnableConfig) -> Any:
    """The conversation a call belongs to: LangGraph's ``thread_id`` (None without one: a
    graph with no checkpointer, or a tool invoked on its own)."""
    configurable = config.get("configurable") or {}
    return configurable.get("thread_id")


def _irreversible(runner: ToolRunner, tool: Any) -> bool:
    spec = runner.registry.get(tool) if isinstance(tool, str) else None
    return spec is not None and spec.effect is Effect.IRREVERSIBLE_WRITE


def _message(result: dict[str, Any], tool: str, call_id: str | None) -> ToolMessage:
    return ToolMessage(content=model_text(result), name=tool, tool_call_id=call_id or "",
                       status="success" if result.get("ok") else "error")


# ---------------------------------------------------------------------- one node run


class _AgentkitToolNode(ToolNode):
    """A ``ToolNode`` that keeps, for each run of the node, who asked what (:class:`_NodeRun`),
    and whose sync path runs its tool calls one after another, in the model's order (so the
    first call that needs a person is the one asked first, as on the async path)."""

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        config = ensure_config(config)
        config["max_concurrency"] = 1
        token = _RUN.set(_NodeRun())
        try:
            return super().invoke(input, config, **kwargs)
        finally:
            _RUN.reset(token)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None,
                      **kwargs: Any) -> Any:
        run = _NodeRun()
        token = _RUN.set(run)
        try:
            return await super().ainvoke(input, config, **kwargs)
        except Exception:
            # A question (GraphInterrupt) or a failure ends the node, and LangGraph's
            # asyncio.gather passes it on at once, its other calls still running: the run
            # ends once they have ended, as on the sync path (whose executor waits for them),
            # so a host that ends with the question ends no write of this run midway.
            # (A cancelled run stops waiting at once: the host's own choice.)
            await run.calls_ended()
            raise
        finally:
            _RUN.reset(token)


#: The node run the current tool call belongs to (its calls run in copies of this context).
_RUN: contextvars.ContextVar[_NodeRun | None] = contextvars.ContextVar("agentkit_langgraph_run",
                                                                      default=None)


def _run() -> _NodeRun:
    run = _RUN.get()
    if run is None:  # a wrap called outside the node's own invoke: a run of its own
        run = _NodeRun()
        _RUN.set(run)
    return run


#: What :meth:`_NodeRun.answer` returns for a stored answer no log entry explains.
_UNMATCHED = object()


class _Asked:
    """One irreversible call that the runner answered: its identity in this conversation,
    the question a person is shown, and the runner's answer (its ``approval_id``)."""

    __slots__ = ("call", "call_id", "key", "question", "result", "task")

    def __init__(self, request: ToolCallRequest, result: dict[str, Any]) -> None:
        call = request.tool_call
        configurable = _config(request).get("configurable") or {}
        # the node's task: its conversation and its checkpoint namespace ("tools:<task id>")
        self.task = (str(configurable.get("thread_id", "")),
                     str(configurable.get("checkpoint_ns", "")))
        self.call_id: str | None = call.get("id")
        self.question: dict[str, Any] = {"tool": call["name"], "arguments": call["args"],
                                         "tool_call_id": self.call_id}
        self.call = _identity(self.question)
        self.key = (*self.task, self.call)
        self.result = result


def _identity(question: dict[str, Any]) -> str:
    """One tool call of one node: its id, its tool and its arguments (canonical JSON)."""
    try:
        arguments = canonical_json(question.get("arguments"))
    except (TypeError, ValueError, RecursionError):
        arguments = "<unencodable>"  # (the runner refused such a call before anyone was asked)
    return canonical_json([str(question.get("tool_call_id") or ""), str(question.get("tool")),
                           arguments])


class _NodeRun:
    """One run of the node: the answers its stored interrupts hold, read once through the
    ask log, and the question it stops on (at most one per run)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answers: dict[str, Any] | None = None  # call identity -> the person's answer
        self._stopped: GraphInterrupt | None = None  # the question this run stops on
        self._out_of_step = False  # a stored answer the log does not explain
        self._last_turn: asyncio.Future[None] | None = None
        self._call_ends: list[asyncio.Future[None]] = []  # async path: one per call of the run

    @contextlib.contextmanager
    def one_call(self) -> Iterator[None]:
        """One call of this run (async path), from its start to its end, however it ends."""
        ended = asyncio.get_running_loop().create_future()
        self._call_ends.append(ended)
        try:
            yield
        finally:
            ended.set_result(None)

    async def calls_ended(self) -> None:
        """Once every call of this run has ended (a cancelled wait cancels none of them)."""
        running = [ended for ended in self._call_ends if not ended.done()]
        if running:
            await asyncio.wait(running)

    def answer(self, asked: _Asked, book: _AskLog) -> Any:
        """The person's answer to ``asked``; raises ``GraphInterrupt`` to ask for it (or for
        the question this run already stops on)."""
        with self._lock:
            if self._answers is None and self._stopped is None:
                self._read_answers(book.entries())
            position = self._answer_or_ask(asked)
            if not isinstance(position, _NewQuestion):
                return position
            raise self._stop(position, book.append(position.position, asked.question), asked)

    async def aanswer(self, asked: _Asked, book: _AskLog) -> Any:
        """:meth:`answer` for the async path: the store is read and written on a worker (the
        calls take their turns: :meth:`in_model_order`)."""
        if self._answers is None and self._stopped is None:
            self._read_answers(await asyncio.to_thread(book.entries))
        position = self._answer_or_ask(asked)
        if not isinstance(position, _NewQuestion):
            return position
        logged = await asyncio.to_thread(book.append, position.position, asked.question)
        raise self._stop(position, logged, asked)

    def in_model_order(self) -> _Turn:
        """The node's irreversible calls decide (and settle) one at a time, in the model's
        order (the order their tasks start in), whatever their awaits."""
        previous, mine = self._last_turn, asyncio.get_running_loop().create_future()
        self._last_turn = mine
        return _Turn(previous, mine)

    def _read_answers(self, entries: list[dict[str, Any]]) -> None:
        """Every stored answer of this node's task, through the log, in its order."""
        answers: dict[str, Any] = {}
        for question in entries:
            try:
                answers[_identity(question)] = interrupt(question)
            except GraphInterrupt as pending:  # the question a person has not answered yet
                self._stopped = pending
                raise
        self._answers = answers

    def _answer_or_ask(self, asked: _Asked) -> Any:
        """The stored answer, :data:`_UNMATCHED`, or a :class:`_NewQuestion` to log."""
        if self._stopped is not None:  # one question per run: the others wait for the next
            raise GraphInterrupt(self._stopped.args[0])
        answers = self._answers if self._answers is not None else {}
        if asked.call in answers:
            return answers[asked.call]
        if self._out_of_step:
            return _UNMATCHED
        try:
            interrupt(asked.question)  # at the end of the log: a new question
        except GraphInterrupt as new:
            return _NewQuestion(len(answers), new)
        # LangGraph held an answer past the end of the log: the log was lost (a durable
        # checkpointer over an in-memory store). Whose answer it is cannot be known.
        log.error("langgraph: a stored answer at position %d of thread %r has no entry in the "
                  "ask log (is the runner's store as durable as the checkpointer?); it is not "
                  "acted on, and the approval waits for a person", len(answers), asked.task[0])
        self._out_of_step = True
        return _UNMATCHED

    def _stop(self, new: _NewQuestion, logged: dict[str, Any] | None,
              asked: _Asked) -> GraphInterrupt:
        """The run stops on the question the log names for the new position (ours, unless
        another process logged another call there first)."""
        stop = new.interrupt
        if logged is not None and _identity(logged) != asked.call:
            [ours] = stop.args[0]
            stop = GraphInterrupt((Interrupt(value=logged, id=ours.id),))
        self._stopped = stop
        return stop


class _NewQuestion:
    """A question asked at the end of the log (``position``): to log, then raise."""

    __slots__ = ("interrupt", "position")

    def __init__(self, position: int, interrupt: GraphInterrupt) -> None:
        self.position = position
        self.interrupt = interrupt


class _Turn:
    """One irreversible call's turn to decide (see :meth:`_NodeRun.in_model_order`)."""

    def __init__(self, previous: asyncio.Future[None] | None, mine: asyncio.Future[None]) -> None:
        self.previous = previous
        self.mine = mine

    async def __aenter__(self) -> None:
        if self.previous is not None:
            await asyncio.shield(self.previous)  # (a cancelled waiter cancels only itself)

    async def __aexit__(self, *exc: object) -> None:
        if not self.mine.done():
            self.mine.set_result(None)


# ---------------------------------------------------------------------- the ask log


class _AskLog:
    """Which call each of a node task's questions was shown for, in the runner's store.

    Entry n (a completed key of its own, written once) is the question the n-th
    ``interrupt()`` of the task asked: the tool, the arguments and the tool-call id.
    """

    def __init__(self, store: Any, task: tuple[str, str]) -> None:
        self.store = store
        digest = hashlib.sha256("\x00".join(task).encode("utf-8", "surrogatepass")).hexdigest()
        self.prefix = f"agentkit.langgraph.ask:{digest[:32]}:"

    def entries(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        while True:
            stored = self._read(len(found))
            if stored is None:
                return found
            found.append(stored)

    def append(self, position: int, question: dict[str, Any]) -> dict[str, Any] | None:
        """Log ``question`` at ``position``; the question logged there (ours, or another
        process's that came first), None if the store could not keep it."""
        text = json.dumps(question, ensure_ascii=False, sort_keys=True, default=repr)
        # (writing an entry touches nothing else: a claim its dead writer left is taken over)
        stored = self.store.run_once(self.prefix + str(position),
                                     lambda: {"ok": True, "data": text}, recover=_not_written)
        if not stored.get("ok"):
            log.error("langgraph: the ask log could not be written (%s): the answer to this "
                      "question will not be acted on", stored.get("error"))
            return None
        return _question(stored)

    def _read(self, position: int) -> dict[str, Any] | None:
        read = getattr(self.store, "result", None)
        if read is not None:
            stored = read(self.prefix + str(position))
        else:  # a store with run_once only: an operation that fails is never kept
            stored = self.store.run_once(self.prefix + str(position),
                                         lambda: {"ok": False, "error": "absent"})
        return _question(stored) if isinstance(stored, dict) and stored.get("ok") else None


def _not_written() -> None:
    """An ask-log entry's status lookup: a claim without a result wrote nothing (None)."""


def _question(stored: dict[str, Any]) -> dict[str, Any] | None:
    try:
        question = json.loads(stored.get("data", ""))
    except ValueError:
        return None
    return question if isinstance(question, dict) else None


# ---------------------------------------------------------------------- settling


class _Settlements:
    """The approved calls this node settles (or settled), by conversation and tool call.

    Each settlement runs on a thread of its own, which no abandoned or cancelled node run can
    stop, and its future is marked running before anyone can wait on it, so a waiter that is
    cancelled cancels only its own wait. A re-run of the node joins the settlement still under
    way (the runner would answer ``in_progress``). The most recent :data:`KEEP` are kept; an
    older one is found settled in the store by the runner."""

    KEEP = 1024

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: OrderedDict[tuple[str, ...], Future[dict[str, Any]]] = OrderedDict()

    def get(self, key: tuple[str, ...]) -> Future[dict[str, Any]] | None:
        with self._lock:
            return self._calls.get(key)

    def start(self, key: tuple[str, ...],
              settle: Callable[[], dict[str, Any]]) -> Future[dict[str, Any]]:
        with self._lock:
            known = self._calls.get(key)
            if known is not None:
                self._calls.move_to_end(key)
                return known
            future: Future[dict[str, Any]] = Future()
            future.set_running_or_notify_cancel()  # from now on nobody can cancel it
            self._calls[key] = future
            while len(self._calls) > self.KEEP:
                oldest = next(iter(self._calls))
                if not self._calls[oldest].done():
                    break
                del self._calls[oldest]
        threading.Thread(target=_run_settlement, args=(future, settle), daemon=True,
                         name="agentkit-langgraph-approved").start()
        return future


def _run_settlement(future: Future[dict[str, Any]], settle: Callable[[], dict[str, Any]]) -> None:
    try:
        future.set_result(settle())
    except BaseException as exc:  # never raised for model input; passed on, not lost
        future.set_exception(exc)


def _settle(runner: ToolRunner, settlements: _Settlements, asked: _Asked,
            answer: Any) -> Future[dict[str, Any]]:
    """Act on a person's answer to ``asked`` (whose runner answer was ``approval_required``)."""
    result, call_id = asked.result, asked.call_id
    if answer is _UNMATCHED:  # nobody can say whose answer it was: the approval waits
        done: Future[dict[str, Any]] = Future()
        done.set_result(result)
        return done
    approval_id = result["approval_id"]
    if answer is True:
        return settlements.start(asked.key,
                                 lambda: runner.approve(approval_id, call_id=call_id))
    # a person's "no" (or anything but True): deny it; a call settled meanwhile keeps its result
    return settlements.start(asked.key, lambda: runner.deny(approval_id, call_id=call_id))
