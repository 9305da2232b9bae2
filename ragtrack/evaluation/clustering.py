"""Which items rise and fall together: the clusters a comparison resamples.

Questions about one document share its chunking, its headings and its quirks: a
change that fixes one of them often fixes its neighbours. Treating them as
independent makes intervals too narrow (Miller 2024, "Adding Error Bars to Evals").
A clustering names, for each item record, the cluster it belongs to:

* ``document`` (the default) — the document of the item's first GT passage: the
  part of its ID before ``#`` (a folder corpus's file path; a JSONL corpus whose IDs
  have no ``#`` counts each passage as its own document);
* ``item`` — each item its own cluster (the plain paired bootstrap);
* ``type`` — the question type (A/B/C/D), a golden field;
* ``tag`` — the item's first tag, a golden field (items without tags each alone).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ragtrack.records import ItemRecord
from ragtrack.registry import Registry

DEFAULT = "document"


def document_of(passage_id: str) -> str:
    """A passage's document: its ID's path before ``#`` (the ID itself when it has none)."""
    return passage_id.partition("#")[0]


@dataclass(frozen=True)
class Clustering:
    name: str
    description: str
    key: Callable[[ItemRecord], str]


CLUSTERINGS: Registry[Clustering] = Registry(
    "clustering",
    {
        "document": Clustering(
            "document",
            "the GT document (first GT passage's)",
            lambda r: document_of(r.gt_context_ids[0]) if r.gt_context_ids else f"item:{r.id}",
        ),
        "item": Clustering("item", "each item alone", lambda r: f"item:{r.id}"),
        "type": Clustering("type", "the question type", lambda r: r.type),
        "tag": Clustering("tag", "the first tag", lambda r: r.tags[0] if r.tags else f"item:{r.id}"),
    },
)


def cluster_labels(records: list[ItemRecord], clustering: str = DEFAULT) -> dict[str, str]:
    """Item ID → cluster label under ``clustering`` (a registered name)."""
    key = CLUSTERINGS.get(clustering).key
    return {r.id: key(r) for r in records}


def describe(clustering: str, labels: dict[str, str]) -> str:
    """``clustered by the GT document (first GT passage's): 16 clusters of 48 items``."""
    c = CLUSTERINGS.get(clustering)
    return f"clustered by {c.description}: {len(set(labels.values()))} clusters of {len(labels)} items"
