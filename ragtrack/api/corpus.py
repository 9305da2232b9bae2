"""The corpus as a person picking GT sees it: list passages, show one, search them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ragtrack.config import load_config
from ragtrack.corpus import Corpus, Document, Passage, suggestion
from ragtrack.errors import RagtrackError
from ragtrack.golden import passage_fingerprint

if TYPE_CHECKING:
    from ragtrack.passage_search import Hit


@dataclass(frozen=True)
class PassageRow:
    """One canonical passage: its ID, document, heading path and size (``text`` only when shown)."""

    id: str
    doc_id: str
    title: str
    chars: int
    fingerprint: str
    text: str | None = None

    @classmethod
    def of(cls, p: Passage, with_text: bool = False) -> PassageRow:
        return cls(p.id, p.doc_id, p.title, len(p.text), passage_fingerprint(p.text), p.text if with_text else None)

    def to_json(self) -> dict:
        data = {"id": self.id, "doc_id": self.doc_id, "title": self.title, "chars": self.chars}
        data["fingerprint"] = self.fingerprint
        if self.text is not None:
            data["text"] = self.text
        return data


def open_corpus(root: str | Path = ".", corpus_path: str | None = None) -> Corpus:
    """The project's corpus (``--corpus`` or ``[project] corpus`` of ragtrack.toml)."""
    config = load_config(root)
    return config.load_corpus(corpus_path)


def list_passages(
    *, root: str | Path = ".", corpus_path: str | None = None, doc: str | None = None, corpus: Corpus | None = None
) -> list[PassageRow]:
    """Every passage in document order; ``doc`` narrows to one document or a folder of them."""
    corpus = corpus or open_corpus(root, corpus_path)
    docs = select_documents(corpus, [doc]) if doc is not None else list(corpus.documents.values())
    return [PassageRow.of(p) for d in docs for p in d.passages]


def select_documents(corpus: Corpus, names: list[str]) -> list[Document]:
    """The documents ``names`` pick, in corpus order: a document's path, or a folder holding several."""
    picked = []
    root = Path(corpus.source).resolve()
    for name in names:
        prefix = name.rstrip("/") + "/"
        whole = name.strip() in (".", "./") or Path(name).resolve() == root  # the corpus folder itself
        found = [d for d in corpus.documents.values() if whole or d.id == name or d.id.startswith(prefix)]
        if not found:
            raise RagtrackError(f"no document {name!r} in {corpus.source}{suggestion(name, list(corpus.documents))}")
        picked += [d for d in found if d not in picked]
    order = {doc_id: n for n, doc_id in enumerate(corpus.documents)}
    return sorted(picked, key=lambda d: order[d.id])


def show_passage(passage_id: str, *, root: str | Path = ".", corpus_path: str | None = None) -> PassageRow:
    """One passage with its full text."""
    corpus = open_corpus(root, corpus_path)
    if passage_id not in corpus.passages:
        hint = suggestion(passage_id, list(corpus.passages))
        raise RagtrackError(f"no passage {passage_id!r} in {corpus.source}{hint}")
    return PassageRow.of(corpus.passages[passage_id], with_text=True)


def search_passages(
    query: str,
    *,
    root: str | Path = ".",
    corpus_path: str | None = None,
    k: int = 10,
    mode: str = "auto",
    embedding: str | None = None,
    on_stage: Callable[[str], None] | None = None,
) -> tuple[str, list[Hit]]:
    """The mode used and the top ``k`` passages for ``query`` (``hybrid``: BM25 + dense fused with RRF;
    ``bm25``; ``dense``; ``auto``: hybrid, or BM25 when the embedder does not read the corpus's language).
    The embedder follows the corpus's language unless ``embedding`` names one; ``on_stage`` hears the
    slow steps of a first search (loading the model, building the passage index)."""
    from ragtrack.passage_search import PassageSearch, resolve_mode
    from ragtrack.pipeline.models import default_embedding

    if not query.strip():
        raise RagtrackError("the search query is empty")
    corpus = open_corpus(root, corpus_path)
    embedding = embedding or default_embedding(corpus.language)
    mode = resolve_mode(mode, corpus.language, embedding)
    searcher = PassageSearch(corpus, load_config(root).cache_dir, mode, embedding, on_stage=on_stage)
    return mode, searcher.search(query, k)
