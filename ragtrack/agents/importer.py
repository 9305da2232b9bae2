"""A platform's knowledge base → a local corpus JSONL with canonical passage IDs, plus its ID table.

The golden set must be written against what the platform really indexed, so
``ragtrack corpus import dify|ragflow`` pulls every document and segment over
the platform's dataset API. Each segment becomes one passage with ID
``<document name>#<position>`` (``<dataset name>/<document name>#<position>``
when several knowledge bases are imported together); the passages of one
document share a ``doc_id``, so they form one document again (and ragtrack's
own versions can chunk it). Beside the corpus, ``<name>.ids.json`` maps each
platform segment ID to its passage: at eval time an external agent's
contexts are mapped through it (see :func:`ragtrack.agents.mapping.id_table_path`).

A re-import compares with the corpus it replaces and reports which passages
were added, removed or changed, so the golden set can be checked.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragtrack.agents.mapping import ID_TABLE_FORMAT, id_table_path
from ragtrack.errors import RagtrackError
from ragtrack.files import atomic_write_json, atomic_write_text, read_jsonl, read_text
from ragtrack.registry import Registry

#: Platform name → ``fetch(base_url, api_key, datasets, timeout_s) -> list[SourceDocument]``.
PLATFORMS: Registry[Callable[..., list]] = Registry(
    "platform",
    {
        "dify": "ragtrack.agents.dify:fetch_knowledge",
        "ragflow": "ragtrack.agents.ragflow:fetch_knowledge",
    },
)
PAGE_SIZE = 100  # the most either platform serves per page


@dataclass(frozen=True)
class SourceSegment:
    id: str  # the platform's segment / chunk ID
    position: int  # 1-based, within its document
    text: str


@dataclass
class SourceDocument:
    dataset_id: str
    dataset_name: str
    id: str  # the platform's document ID
    name: str
    segments: list[SourceSegment] = field(default_factory=list)


@dataclass(frozen=True)
class ImportReport:
    corpus_path: Path
    id_table_path: Path
    documents: int
    passages: int
    added: list[str]
    removed: list[str]
    changed: list[str]
    first_import: bool


def paged(fetch: Callable[[int], tuple[list[Any], bool]]) -> Iterator[Any]:
    """Items of every page: ``fetch(page)`` → (items, more). Stops on an empty page too, because
    Dify's ``has_more`` is ``len(page) == limit`` (true after an exactly full last page)."""
    page = 1
    while True:
        items, more = fetch(page)
        yield from items
        if not items or not more:
            return
        page += 1


def resolve_datasets(wanted: list[str], available: list[tuple[str, str]], platform: str) -> list[tuple[str, str]]:
    """Each wanted dataset (an ID or a name) → (id, name) among the ``available`` (id, name) pairs;
    one named twice (by its ID and its name) is imported once."""
    out: list[tuple[str, str]] = []
    for w in wanted:
        match = [d for d in available if d[0] == w] or [d for d in available if d[1] == w]
        if len(match) != 1:
            names = ", ".join(f"{name} ({i})" for i, name in available) or "none visible to this key"
            why = "is ambiguous" if match else "not found"
            raise RagtrackError(f"{platform} knowledge base {w!r} {why}; available: {names}")
        if match[0] not in out:
            out.append(match[0])
    return out


def passage_rows(documents: list[SourceDocument]) -> tuple[list[dict], dict[str, list[str]], dict[str, str]]:
    """Corpus rows, segment ID → passage IDs, and platform document ID → corpus document ID."""
    several = len({d.dataset_id for d in documents}) > 1
    rows, segments, doc_ids, used = [], {}, {}, set()
    for doc in sorted(documents, key=lambda d: (d.dataset_name, d.name, d.id)):
        key = f"{doc.dataset_name}/{doc.name}" if several else doc.name
        if key in used:  # two documents with one name: the later one (by ID) gets a suffix
            key = f"{key}~{doc.id[:8]}"
        used.add(key)
        for seg in sorted(doc.segments, key=lambda s: s.position):
            text = unicodedata.normalize("NFC", seg.text.replace("\r\n", "\n").replace("\r", "\n"))
            if not text.strip():
                continue
            pid = f"{key}#{seg.position}"
            rows.append({"id": pid, "text": text, "title": doc.name, "doc_id": key})
            segments[seg.id] = [pid]
            doc_ids[doc.id] = key
    return rows, segments, doc_ids


def write_corpus(documents: list[SourceDocument], out: Path, platform: str, base_url: str) -> ImportReport:
    """Write the corpus JSONL and its ID table (atomically); report what changed since the last import."""
    rows, segments, doc_ids = passage_rows(documents)
    datasets = sorted({(d.dataset_id, d.dataset_name) for d in documents})
    if not rows:
        raise RagtrackError(f"the {platform} knowledge base holds no segment with text; nothing imported")
    before = _previous(out)
    atomic_write_text(out, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    table = id_table_path(out)
    atomic_write_json(
        table,
        {
            "format": ID_TABLE_FORMAT,
            "platform": platform,
            "base_url": base_url,
            "datasets": [{"id": i, "name": n} for i, n in datasets],
            "corpus": out.name,
            "segments": segments,
            "documents": doc_ids,
        },
    )
    now = {r["id"]: r["text"] for r in rows}
    return ImportReport(
        out,
        table,
        len({r["doc_id"] for r in rows}),
        len(rows),
        added=sorted(set(now) - set(before)) if before else [],
        removed=sorted(set(before) - set(now)),
        changed=sorted(p for p in set(now) & set(before) if now[p] != before[p]),
        first_import=not before,
    )


def _previous(path: Path) -> dict[str, str]:
    """Passage ID → text of the corpus an import is about to replace (empty when there is none)."""
    if not path.is_file():
        return {}
    rows, _ = read_jsonl(path, read_text(path, normalize=True))
    return {str(r.get("id")): str(r.get("text")) for _, r in rows}
