"""Which items rise and fall together: the clusters a comparison resamples.

Questions about one document share its chunking, its headings and its quirks: a
change that fixes one of them often fixes its neighbours. Treating them as
independent makes intervals too narrow (Miller 2024, "Adding Error Bars to Evals").
A clustering names, for each item record, the cluster it belongs to:

* ``document`` (the default) — items that share *any* GT document are one cluster:
  the connected components of the graph whose edges join an item to each of its GT
  documents (a document is the part of a passage ID before ``#``: a folder corpus's
  file path; a JSONL corpus whose IDs have no ``#`` counts each passage as its own
  document). An item that spans two documents ties their questions together, so
  clustering by the first GT passage's document alone left dependent items in
  different clusters (22 of the shipped 48 items span several documents: 29
  first-document clusters, 14 connected ones) and intervals too narrow (88 %
  coverage in the simulation with half the items on two documents);
* ``item`` — each item its own cluster (the plain paired interval);
* ``type`` — the question type (A/B/C/D), a golden field;
* ``tag`` — the item's first tag, a golden field (items without tags each alone).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass

from ragtrack.records import ItemRecord
from ragtrack.registry import Registry

DEFAULT = "document"


def document_of(passage_id: str) -> str:
    """A passage's document: its ID's path before ``#`` (the ID itself when it has none)."""
    return passage_id.partition("#")[0]


def components(groups: Sequence[Iterable[Hashable]]) -> list[int]:
    """Per entry of ``groups`` (each a set of keys, e.g. an item's GT documents), its connected component:
    entries sharing any key, directly or through others, get the same number (0, 1, … in order of first
    appearance). An entry with no key is alone."""
    parent: dict[Hashable, Hashable] = {}

    def root(x: Hashable) -> Hashable:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    keyed = []
    for i, keys in enumerate(groups):
        own = [("key", k) for k in keys] or [("alone", i)]
        for k in own:
            parent.setdefault(k, k)
        first = root(own[0])
        for k in own[1:]:
            parent[root(k)] = first
        keyed.append(own[0])
    numbers: dict[Hashable, int] = {}
    return [numbers.setdefault(root(k), len(numbers)) for k in keyed]


def _by_documents(records: list[ItemRecord]) -> dict[str, str]:
    comps = components([{document_of(p) for p in r.gt_context_ids} for r in records])
    first: dict[int, str] = {}
    for r, c in zip(records, comps, strict=True):  # a cluster is named by its first item's first document
        first.setdefault(c, document_of(r.gt_context_ids[0]) if r.gt_context_ids else f"item:{r.id}")
    return {r.id: first[c] for r, c in zip(records, comps, strict=True)}


def _per_item(key: Callable[[ItemRecord], str]) -> Callable[[list[ItemRecord]], dict[str, str]]:
    return lambda records: {r.id: key(r) for r in records}


@dataclass(frozen=True)
class Clustering:
    name: str
    description: str
    labels: Callable[[list[ItemRecord]], dict[str, str]]  # the records → item ID → cluster label


CLUSTERINGS: Registry[Clustering] = Registry(
    "clustering",
    {
        "document": Clustering("document", "GT documents shared (any in common: one cluster)", _by_documents),
        "item": Clustering("item", "each item alone", _per_item(lambda r: f"item:{r.id}")),
        "type": Clustering("type", "the question type", _per_item(lambda r: r.type)),
        "tag": Clustering("tag", "the first tag", _per_item(lambda r: r.tags[0] if r.tags else f"item:{r.id}")),
    },
)


def cluster_labels(records: list[ItemRecord], clustering: str = DEFAULT) -> dict[str, str]:
    """Item ID → cluster label under ``clustering`` (a registered name)."""
    return CLUSTERINGS.get(clustering).labels(records)


def describe(clustering: str, labels: dict[str, str]) -> str:
    """``clustered by GT documents shared (…): 14 clusters of 48 items, the largest 9``."""
    c = CLUSTERINGS.get(clustering)
    sizes = Counter(labels.values())
    largest = max(sizes.values(), default=0)
    return f"clustered by {c.description}: {len(sizes)} clusters of {len(labels)} items, the largest {largest}"
