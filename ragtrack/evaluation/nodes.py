"""Node metrics: each node of a workflow scored on its own, and the first node that failed an item.

RAG evaluation is not one score for the whole flow: a wrong answer should
point at the node to fix. Each stage of an item's record carries its node's
role (``stage.node["role"]``: declared in ``[agent.nodes]``, inferred from
node types, or a reference pipeline's step), and the golden item may say what
the nodes should do (``intent``, ``must_keep``). Per run:

* **intent accuracy** — the share of items with an ``intent`` whose intent node
  chose that class (``class_name``), with a per-class confusion table;
* **rewrite retention** — the share of ``must_keep`` terms the rewrite's
  output still holds (case-folded substring), averaged over items with terms;
* **rewrite fidelity** — on items without ``must_keep``, the rewrite-fidelity
  judge's verdict (0–1) on the rewritten query against the question
  (:mod:`ragtrack.evaluation.rewrite_judge`);
* **retrieval per node and for their union** — context recall and hit rate of
  each retrieval node's own contexts, and of every node's together (the
  item's contexts: its ordinary retrieval metrics);
* **generation groundedness** — the groundedness verdict on the answer, read
  against the contexts the generation node received (in a workflow with one
  branch per class, the contexts of the branch that ran);
* each node's **latency** (``elapsed_s``) and **tokens**, by title.

The first failing node of an item, in flow order: the rewrite lost a
must-keep term (without terms: its fidelity was judged below 3 of 5) → the
intent node chose the wrong class → retrieval brought no GT passage (hit rate
0) → the generation was unfaithful (groundedness below 3 of 5) or wrong
(correctness below 3 of 5); a node that failed outright
(status failed) is its role's failure. Everything here is a pure function of
the records.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from typing import Protocol

from ragtrack.agent import FLOW
from ragtrack.evaluation.retrieval_metrics import mean, retrieval_scores
from ragtrack.records import ItemRecord, StageRecord, passage_groups

PASS_SCORE = 3  # a judge verdict below this (of 5) fails the generation
NODE_PREFIX = "node/"
INTENT_ACCURACY = "node/intent_accuracy"
REWRITE_RETENTION = "node/rewrite_retention"
REWRITE_FIDELITY = "node/rewrite_fidelity"
GENERATION_GROUNDEDNESS = "node/generation_groundedness"
UNION = "union"
#: Node metrics where higher is better (compare and promote pair them; guards name them).
QUALITY = ("intent_accuracy", "rewrite_retention", "rewrite_fidelity", "generation_groundedness")


class Staged(Protocol):
    """A record with a workflow's stages: an eval's item, or a production message."""

    stages: list[StageRecord]


def role_stages(record: Staged, role: str) -> list[StageRecord]:
    return [s for s in record.stages if s.node.get("role") == role]


def ran_retrievals(record: Staged) -> list[StageRecord]:
    """The retrieval nodes that did their work (an empty result is work done: it found nothing)."""
    return [s for s in role_stages(record, "retrieval") if not _failed(s)]


def has_generation(record: Staged) -> bool:
    """Whether a workflow's generation node answered (a pipeline's generate step has no node type)."""
    return any("type" in s.node and not _failed(s) for s in role_stages(record, "generation"))


def _failed(stage: StageRecord) -> bool:
    return stage.node.get("status") in ("failed", "exception")


def rewritten(stage: StageRecord) -> str:
    """What a rewrite node produced: a Dify LLM node's ``text``, a pipeline's query variants."""
    text = stage.outputs.get("text")
    if isinstance(text, str):
        return text
    queries = stage.outputs.get("queries")
    return "\n".join(str(q) for q in queries) if isinstance(queries, list) else ""


def retention(record: ItemRecord) -> float | None:
    """The share of the item's ``must_keep`` terms the rewrite kept (None: no terms, or no rewrite ran)."""
    stages = [s for s in role_stages(record, "rewrite") if not _failed(s)]
    if not record.must_keep or not stages:
        return None
    text = rewritten(stages[0]).casefold()
    return sum(1 for t in record.must_keep if t.casefold() in text) / len(record.must_keep)


def fidelity(record: ItemRecord) -> float | None:
    """The rewrite-fidelity verdict (0–1) on an item without ``must_keep`` (None: not judged)."""
    if record.must_keep:
        return None
    for s in role_stages(record, "rewrite"):
        score = s.node.get("fidelity")
        if not _failed(s) and isinstance(score, int | float) and not isinstance(score, bool):
            return (score - 1) / 4
    return None


def predicted_intent(record: Staged) -> str | None:
    """The class the intent node chose (None: no intent node finished)."""
    for s in role_stages(record, "intent"):
        if not _failed(s):
            name = s.outputs.get("class_name")
            return str(name) if name is not None else None
    return None


def intent_correct(record: ItemRecord) -> float | None:
    """1.0 when the intent node chose the item's ``intent``, 0.0 when another class (None: not scored)."""
    chosen = predicted_intent(record) if record.intent else None
    return None if chosen is None else float(chosen == record.intent)


def generation_grounded(record: ItemRecord) -> float | None:
    """The groundedness verdict (0-1) on the answer of an item with a workflow's generation node (a
    pipeline's generate step would repeat ``norm/groundedness``, one more test in the compared family)."""
    verdict = record.judges.get("groundedness")
    if not has_generation(record) or verdict is None:
        return None
    return verdict.normalized


def node_retrieval(record: ItemRecord, stage: StageRecord) -> dict[str, float | None]:
    """A retrieval node's own retrieval metrics against the item's GT."""
    k = len(stage.contexts) or 1
    return retrieval_scores(passage_groups(stage.contexts), record.gt_context_ids, k, record.gt_groups)


def _judge_below(record: ItemRecord, judge: str) -> bool:
    verdict = record.judges.get(judge)
    return verdict is not None and verdict.score is not None and verdict.score < PASS_SCORE


def first_failing(record: ItemRecord, *, unreferenced: bool = False) -> str:
    """The first role, in flow order, that failed the item ("" when none did). ``unreferenced``: a
    record with no GT to score retrieval by (a production message), whose retrieval fails when every
    retrieval node that ran found nothing (with GT, that is a hit rate of 0 already)."""
    failed_roles = {s.node.get("role") for s in record.stages if _failed(s)}
    for role in FLOW:
        if role in failed_roles:
            return role
        ran = ran_retrievals(record) if role == "retrieval" and unreferenced else []
        if ran and not any(s.contexts for s in ran):
            return role
        if role == "rewrite" and (kept := retention(record)) is not None and kept < 1:
            return role
        if role == "rewrite" and (faithful := fidelity(record)) is not None and faithful < (PASS_SCORE - 1) / 4:
            return role
        chosen = predicted_intent(record) if role == "intent" and record.intent else None
        if chosen is not None and chosen != record.intent:
            return role
        if role == "retrieval" and role_stages(record, "retrieval") and record.retrieval.get("hit_rate") == 0.0:
            return role
        judged_low = _judge_below(record, "groundedness") or _judge_below(record, "correctness")
        if role == "generation" and role_stages(record, "generation") and record.answered and judged_low:
            return role
    return ""


def confusion(records: list[ItemRecord]) -> dict[str, dict[str, int]]:
    """Expected class → chosen class → items (items with an ``intent`` whose intent node finished)."""
    table: dict[str, dict[str, int]] = defaultdict(dict)
    for r in records:
        if r.intent and (chosen := predicted_intent(r)) is not None:
            table[r.intent][chosen] = table[r.intent].get(chosen, 0) + 1
    return {k: dict(sorted(v.items())) for k, v in sorted(table.items())}


def failures_by_node(records: list[ItemRecord]) -> dict[str, int]:
    """Role → items whose first failing node it is, in flow order (roles that failed none left out)."""
    counts = Counter(r.first_failing for r in records if r.first_failing)
    return {role: counts[role] for role in FLOW if counts[role]}


def metric_name(title: str) -> str:
    """A node title as MLflow accepts it in a metric name (letters of any script, digits, _ - . space)."""
    return re.sub(r"[^\w\-. ]", "_", title).strip() or "node"


def node_metrics(records: list[ItemRecord]) -> dict[str, float]:
    """The run's node metrics (none when no record has node roles)."""
    out: dict[str, float] = {}
    scored = [v for r in records if (v := intent_correct(r)) is not None]
    if scored:
        out[INTENT_ACCURACY] = sum(scored) / len(scored)
        out["node/counts/intent"] = float(len(scored))
    if (value := mean(retention(r) for r in records)) is not None:
        out[REWRITE_RETENTION] = value
        out["node/counts/rewrite"] = float(sum(1 for r in records if retention(r) is not None))
    if (value := mean(fidelity(r) for r in records)) is not None:
        out[REWRITE_FIDELITY] = value
        out["node/counts/rewrite_fidelity"] = float(sum(1 for r in records if fidelity(r) is not None))
    per_node: dict[str, list[dict[str, float | None]]] = defaultdict(list)
    union: list[dict[str, float | None]] = []
    for r in records:
        ran = ran_retrievals(r)
        for s in ran:
            per_node[metric_name(s.name)].append(node_retrieval(r, s))
        if ran and r.retrieval:
            union.append(r.retrieval)
    for title, scores in sorted(per_node.items()):
        for name in ("context_recall", "hit_rate"):
            if (value := mean(x.get(name) for x in scores)) is not None:
                out[f"node/retrieval/{title}/{name}"] = value
        out[f"node/retrieval/{title}/items"] = float(len(scores))
        out[f"node/retrieval/{title}/empty_rate"] = 0.0  # filled below from the contexts
    for r in records:
        for s in ran_retrievals(r):
            key = f"node/retrieval/{metric_name(s.name)}/empty_rate"
            if not s.contexts:
                out[key] += 1 / len(per_node[metric_name(s.name)])
    for name in ("context_recall", "hit_rate"):
        if (value := mean(x.get(name) for x in union)) is not None:
            out[f"node/retrieval/{UNION}/{name}"] = value
    if (value := mean(generation_grounded(r) for r in records)) is not None:
        out[GENERATION_GROUNDEDNESS] = value
    elapsed: dict[str, list[float]] = defaultdict(list)
    tokens: dict[str, list[float]] = defaultdict(list)
    for r in records:
        for s in r.stages:
            if "elapsed_s" in s.node:
                elapsed[metric_name(s.name)].append(float(s.node["elapsed_s"]))
                tokens[metric_name(s.name)].append(float(s.node.get("tokens") or 0))
    for title in sorted(elapsed):
        out[f"node/latency_s/{title}"] = sum(elapsed[title]) / len(elapsed[title])
        out[f"node/tokens/{title}"] = sum(tokens[title]) / len(tokens[title])
    if any(r.stages and any(s.node.get("role") for s in r.stages) for r in records):
        for role in FLOW:
            out[f"node/first_failing/{role}"] = float(sum(1 for r in records if r.first_failing == role))
    return out
