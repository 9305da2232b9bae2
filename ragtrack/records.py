"""The records evaluation produces and tracking stores: the contract between the two.

Plain data with a JSON form. An :class:`ItemRecord` is everything about one
golden item in one eval run — what the agent retrieved and said, how each
retrieved context maps to canonical passages, the retrieval metrics, every
judge verdict and what the item cost. A :class:`RunSummary` is what
comparison and promotion need to know of an eval run once it is stored.

This module imports nothing heavy, so the MLflow plugin and the CLI can read
records without loading the retrieval stack.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ragtrack.errors import RagtrackError
from ragtrack.llm.accounting import Usage

#: Bumped when the JSON form of an item record changes incompatibly.
RECORD_FORMAT = 2
#: How a context that maps to no canonical passage appears in a ranked ID list (``unmapped:<unit id>``).
UNMAPPED = "unmapped:"


def passage_groups(contexts) -> list[tuple[str, ...]]:
    """The passages each context covers, in rank order: what retrieval metrics are computed from.

    A context that maps to no passage still takes its rank, as ``unmapped:<unit id>``:
    it was retrieved and handed to the generator, and it is relevant to no item, so it
    counts in precision's denominator and pushes later units down. ``contexts`` are
    :class:`ContextRecord` or :class:`ragtrack.agent.RetrievedContext` objects.
    """
    return [tuple(c.passage_ids) or (UNMAPPED + c.unit_id,) for c in contexts]


def ranked_passage_ids(contexts) -> list[str]:
    """Canonical IDs in rank order, each at the first position it appears (unmapped contexts included)."""
    return list(dict.fromkeys(pid for group in passage_groups(contexts) for pid in group))


@dataclass
class JudgeRecord:
    """One judge's verdict on one item: a 1–5 score with its reason, or the error and raw reply.

    Asked K times (``--judge-samples K``), ``samples`` keeps the K scores, ``score`` is their mean
    and ``reason`` the first sample's; a record without ``samples`` was judged once."""

    score: float | None  # with several judge samples, their mean
    normalized: float | None
    reason: str
    error: str | None = None
    raw: str | None = None
    samples: list[int] = field(default_factory=list)  # every verdict when the judge was asked K > 1 times


@dataclass
class ContextRecord:
    """One retrieved unit as the agent returned it, and the canonical passages it maps to.

    ``mapping`` says how the passages were found, so a user can audit it:
    ``span`` (character provenance), ``source`` (generated from those passages),
    ``id_table`` (a platform ID table), ``passage_id`` (the agent named a corpus
    passage), ``text 0.83`` (located by its text: the share of it found in the
    corpus) or ``unmapped``.
    """

    unit_id: str
    text: str
    passage_ids: list[str]
    score: float | None = None
    mapping: str = "span"


@dataclass
class StageRecord:
    """One timed stage of answering (see :class:`ragtrack.agent.Stage`): a span of the item's trace."""

    name: str
    kind: str
    start_ns: int
    end_ns: int
    inputs: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    contexts: list[ContextRecord] = field(default_factory=list)
    node: dict[str, Any] = field(default_factory=dict)  # a workflow node's id, type, title, status, ...

    @classmethod
    def from_json(cls, data: dict) -> StageRecord:
        return cls(
            **{
                **_known(cls, data),
                "contexts": [ContextRecord(**_known(ContextRecord, c)) for c in data.get("contexts", [])],
            }
        )


def _known(cls: type, data: dict) -> dict:
    """The keys of ``data`` that ``cls`` has fields for: a record written by a newer ragtrack still reads."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclass
class ItemRecord:
    """Everything about one golden item in one run: what was retrieved, said and scored."""

    id: str
    type: str
    question: str
    gt_context_ids: list[str]
    gt_answer: str
    answer: str
    contexts: list[ContextRecord]
    retrieval: dict[str, float | None]  # None: the metric does not apply to this item
    judges: dict[str, JudgeRecord]
    queries: list[str] = field(default_factory=list)
    outline: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    latency_s: float = 0.0
    gt_groups: list[list[str]] = field(default_factory=list)  # multi-hop items: one OR-group per hop
    usage: dict[str, dict[str, Usage]] = field(default_factory=dict)  # "agent" / "judge" → step → usage
    stages: list[StageRecord] = field(default_factory=list)  # how the answer was produced, timed
    answered: bool = True  # False: the agent gave no answer (see ``errors``), so no judge scored it
    history: list[dict[str, str]] = field(default_factory=list)  # a follow-up's earlier turns (role, content)
    # An answer that cites its contexts: the answer as written (markers and all) and its citation figures
    # (validity, coverage, precision, recall, support; None where a figure has no denominator).
    cited_answer: str = ""
    citations: dict[str, float | None] = field(default_factory=dict)
    intent: str = ""  # the golden item's expected class (node metrics)
    must_keep: list[str] = field(default_factory=list)  # terms the rewrite must keep
    first_failing: str = ""  # the first node role that failed, in flow order ("" none: see evaluation.nodes)

    @property
    def retrieved_unit_ids(self) -> list[str]:
        return [c.unit_id for c in self.contexts]

    @property
    def retrieved_passage_ids(self) -> list[str]:
        """Canonical IDs in rank order (unmapped contexts as ``unmapped:<unit id>``)."""
        return ranked_passage_ids(self.contexts)

    @property
    def unmapped(self) -> list[str]:
        """Unit IDs of the retrieved contexts that map to no canonical passage."""
        return [c.unit_id for c in self.contexts if not c.passage_ids]

    @property
    def failed(self) -> bool:
        """The agent or a judge reported an error for this item."""
        return bool(self.errors) or any(v.error for v in self.judges.values())

    @property
    def settled(self) -> bool:
        """The agent answered and every judge's verdict was read: an eval that resumes keeps this
        record; the others it asks again (a failed call is worth another try, a finished item is not)."""
        return self.answered and not any(v.error for v in self.judges.values())

    @property
    def digest(self) -> str:
        """A short hash of the record's JSON form: what a trace names to say which record it shows
        (an item asked again on resume gets a new record, and its old trace must go)."""
        text = json.dumps(self.to_json(), sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def to_json(self) -> dict:
        data = asdict(self)
        data["usage"] = {who: {s: u.to_json() for s, u in steps.items()} for who, steps in self.usage.items()}
        # The two ranked ID lists, flat, for readers of items.jsonl (derived: ignored when read back).
        data["retrieved_unit_ids"] = self.retrieved_unit_ids
        data["retrieved_passage_ids"] = self.retrieved_passage_ids
        for optional in ("history", "cited_answer", "citations"):
            if not data[optional]:  # a record without them reads (and hashes) as it did before they existed
                del data[optional]
        return {"format": RECORD_FORMAT, **data}

    @classmethod
    def from_json(cls, data: dict) -> ItemRecord:
        if data.get("format", 1) != RECORD_FORMAT:
            raise RagtrackError(
                f"item record {data.get('id')!r} was written by an older ragtrack; evaluate that version again"
            )
        data = _known(cls, data)  # drops the derived ID lists and anything this ragtrack does not know
        data["contexts"] = [ContextRecord(**_known(ContextRecord, c)) for c in data["contexts"]]
        data["judges"] = {k: JudgeRecord(**_known(JudgeRecord, v)) for k, v in data["judges"].items()}
        data["usage"] = {
            who: {s: Usage.from_json(u) for s, u in steps.items()} for who, steps in data.get("usage", {}).items()
        }
        data["stages"] = [StageRecord.from_json(st) for st in data.get("stages", [])]
        return cls(**data)


@dataclass(frozen=True)
class RunSummary:
    """An eval run as comparison and promotion see it: identity, comparability keys, aggregate metrics."""

    run_id: str
    version: str
    golden_digest: str
    judge_identity: str
    min_overlap: str
    substituted: bool
    model_version: str
    metrics: dict[str, float]
    started: int = 0
    compared_to: str = ""  # the champion model version its delta/* metrics are against, if any
    cautions: tuple[str, ...] = ()  # what its figures depend on (a --limit, the agent's warnings), from its tags
    limited: str = ""  # a --limit cut of the golden set: "4 of 16" (items)
    stale_gt: bool = False  # --allow-stale scored items against GT passages the corpus changed
    rank_cutoff: str = ""  # k of nDCG and all-hops: the agent's top_k, or "contexts" (each answer's count)
    substitutions: str = ""  # the models used instead of the spec's (:func:`substitutions`), "" when none
    standing: str = ""  # the champion model version its description was last written against ("none": no champion)


def substitutions(params: dict[str, str]) -> str:
    """``rerank_model `BAAI/bge-reranker-base` → `none``` for every model an eval run used instead of the
    one its spec requested (from the run's ``<stage>_model`` and ``<stage>_model_requested`` params)."""
    swaps = []
    for key, requested in sorted(params.items()):
        name = key.removesuffix("_requested")
        if name != key and params.get(name, requested) != requested:
            swaps.append(f"{name} `{requested}` → `{params[name]}`")
    return ", ".join(swaps)
