"""The "before" picture of notebook 01: tools as plain functions behind an if/elif dispatcher.

This is how many agent prototypes start, and it is kept naive on purpose; the chapter takes
it apart. What it gets wrong, each fixed by one stage of the registry's pipeline:

- the tool list the model is shown is written separately and drifts from this code;
- arguments are not checked: a missing or extra argument surfaces as a ``TypeError`` ...
- ... and ``except TypeError`` then also swallows a ``TypeError`` raised by a *bug inside* a
  tool, reporting it to the model as "bad arguments", so the model retries a call that can
  never work, and the bug stays hidden;
- any other exception (an unknown document id) escapes into the agent loop and ends the run;
- no limits: no timeout, no output cap, no redaction, no budget, no idempotency.

The happy path, though, works, and the registry must not change it: see
``agent.run_baseline`` and ``Transcript.signature``.
"""

from __future__ import annotations

from typing import Any

from agentkit.demo.corpus import Corpus

_corpus: Corpus | None = None


def corpus() -> Corpus:
    """The repository's corpus, loaded on first use."""
    global _corpus
    if _corpus is None:
        _corpus = Corpus.load()
    return _corpus


def search(query: str, limit: int = 3) -> list[dict[str, str]]:
    return corpus().search(query, limit)


def get_document(doc_id: str) -> dict[str, str]:
    return corpus().get(doc_id)  # KeyError for an unknown id, straight to the caller


def dispatch_tool(name: str, arguments: dict[str, Any]) -> Any:
    """Call the tool ``name`` with ``arguments``; returns its raw value or raises.

    Note the ``except TypeError``: it was meant for wrong arguments, but it cannot tell them
    from a bug inside the tool. The registry checks arguments against a schema *before* the
    call instead, so a ``TypeError`` from a handler is correctly a ``tool_failure``.
    """
    try:
        if name == "search_local_sources":
            return search(**arguments)
        elif name == "get_document":
            return get_document(**arguments)
        else:
            return {"error": f"unknown tool {name}"}
    except TypeError:
        return {"error": "bad arguments"}
