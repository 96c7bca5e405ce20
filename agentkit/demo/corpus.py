"""The demo corpus: sixteen short notes the fake agent searches and reads.

Why BM25 written out here rather than a search library: the kit must stay stdlib-only below
pandas, and notebooks compare stored outputs, so the ranking has to be exactly reproducible.
BM25 with fixed parameters, a fixed tokeniser and ties broken by document id is. Scores are
rounded before sorting so that two documents whose float sums differ only in the last bit
(the same terms added in another order) still tie and fall back to the id.

Each file starts with a tiny front matter block::

    ---
    id: idempotency-keys
    title: Idempotency keys
    ---

It is parsed here by hand: two ``key: value`` lines do not justify a YAML dependency.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from agentkit.demo.resources import data_path

#: The demo notes, as installed (see :mod:`agentkit.demo.resources`).
DEFAULT_SOURCES = data_path("sources")

SNIPPET_CHARS = 160
_TOKEN = re.compile(r"[^\W_]+")  # runs of letters and digits, any script
_K1 = 1.2
_B = 0.75


def tokenize(text: str) -> list[str]:
    """Lowercase words: the one tokeniser used for documents, queries and snippets."""
    return _TOKEN.findall(text.lower())


@dataclass(frozen=True)
class Document:
    """One note: ``text`` is the Markdown body without its front matter."""

    id: str
    title: str
    text: str


def parse_document(source: str, *, origin: str = "<string>") -> Document:
    """A document from its file text; a missing or incomplete front matter is a ``ValueError``."""
    lines = source.replace("\r\n", "\n").split("\n")
    if not lines or lines[0].strip() != "---":
        raise ValueError(f"{origin}: no front matter (the first line must be '---')")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise ValueError(f"{origin}: front matter is not closed with '---'") from None
    fields: dict[str, str] = {}
    for line in lines[1:end]:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise ValueError(f"{origin}: front matter line is not 'key: value': {line!r}")
        fields[key.strip()] = value.strip().strip("\"'")
    for key in ("id", "title"):
        if not fields.get(key):
            raise ValueError(f"{origin}: front matter has no {key!r}")
    return Document(fields["id"], fields["title"], "\n".join(lines[end + 1 :]).strip())


def plain_text(markdown: str) -> str:
    """Prose for snippets and quotes: headings dropped, list and emphasis marks removed,
    whitespace collapsed."""
    kept = [line for line in markdown.split("\n") if not line.lstrip().startswith("#")]
    text = " ".join(kept)
    text = re.sub(r"(?m)(^|\s)[-*+]\s+", r"\1", text)  # list bullets
    text = text.replace("**", "").replace("`", "")
    return " ".join(text.split())


class Corpus:
    """Documents with a BM25 index built once, at construction."""

    def __init__(self, documents: Iterable[Document]) -> None:
        self._docs: dict[str, Document] = {}
        for doc in documents:
            if doc.id in self._docs:
                raise ValueError(f"duplicate document id {doc.id!r}")
            self._docs[doc.id] = doc
        self._plain = {i: plain_text(d.text) for i, d in self._docs.items()}
        # The title counts as part of the text: it is the best summary a note has.
        self._tf = {i: Counter(tokenize(f"{d.title}\n{d.text}")) for i, d in self._docs.items()}
        self._length = {i: sum(tf.values()) for i, tf in self._tf.items()}
        self._avg = sum(self._length.values()) / len(self._length) if self._length else 0.0
        df: Counter[str] = Counter()
        for tf in self._tf.values():
            df.update(tf.keys())
        n = len(self._docs)
        # Lucene's idf: always positive, so a term in every document still counts a little.
        self._idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    @classmethod
    def load(cls, path: str | Path | None = None) -> Corpus:
        """Every ``*.md`` file of ``path`` (default: the repository's ``data/sources``)."""
        folder = Path(path) if path is not None else DEFAULT_SOURCES
        if not folder.is_dir():
            raise FileNotFoundError(f"no corpus folder at {folder}")
        files = sorted(folder.glob("*.md"))
        return cls(parse_document(f.read_text(encoding="utf-8"), origin=f.name) for f in files)

    def __len__(self) -> int:
        return len(self._docs)

    def ids(self) -> list[str]:
        return sorted(self._docs)

    def get(self, doc_id: str) -> dict[str, str]:
        """``{"id", "title", "text"}``; an unknown id raises ``KeyError``."""
        doc = self._docs[doc_id]
        return {"id": doc.id, "title": doc.title, "text": doc.text}

    def scores(self, query: str) -> dict[str, float]:
        """BM25 score of every document that shares at least one term with the query."""
        terms = list(dict.fromkeys(tokenize(query)))  # unique, in query order
        out: dict[str, float] = {}
        for doc_id in sorted(self._docs):
            tf, length = self._tf[doc_id], self._length[doc_id]
            score = 0.0
            for term in terms:
                f = tf.get(term, 0)
                if f:
                    norm = _K1 * (1 - _B + _B * length / self._avg)
                    score += self._idf[term] * f * (_K1 + 1) / (f + norm)
            if score > 0:
                out[doc_id] = score
        return out

    def search(self, query: str, limit: int = 3) -> list[dict[str, str]]:
        """The best ``limit`` hits as ``{"id", "title", "snippet"}``, best first, ties by id."""
        if not isinstance(query, str):
            raise TypeError("query must be a str")
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError("limit must be an integer >= 1")
        ranked = sorted(self.scores(query).items(), key=lambda item: (-round(item[1], 9), item[0]))
        terms = set(tokenize(query))
        return [
            {"id": i, "title": self._docs[i].title, "snippet": self.snippet(i, terms)}
            for i, _ in ranked[:limit]
        ]

    def snippet(self, doc_id: str, terms: set[str]) -> str:
        """At most ``SNIPPET_CHARS`` characters of prose starting a little before the first
        query term the note holds (its opening when the match was only in a heading)."""
        text = self._plain[doc_id]
        if len(text) <= SNIPPET_CHARS:
            return text
        first = next((m.start() for m in _TOKEN.finditer(text.lower()) if m.group() in terms), 0)
        start = max(0, first - SNIPPET_CHARS // 4)
        if start:  # back to the start of a word
            start = text.rfind(" ", 0, start) + 1
        lead = "…" if start else ""
        rest = text[start:]
        room = SNIPPET_CHARS - len(lead)
        if len(rest) <= room:
            return lead + rest
        body = rest[: room - 1]
        cut = body.rfind(" ")
        if cut > first - start:  # end at a word boundary, keeping the match in view
            body = body[:cut]
        return f"{lead}{body}…"

    def __repr__(self) -> str:
        return f"Corpus({len(self)} documents)"

