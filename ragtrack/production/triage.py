"""Bad cases from production, ranked by evidence: which problems users keep hitting.

Near-duplicate questions are clustered (:mod:`ragtrack.production.similarity`);
each cluster counts its messages and distinct users and the evidence against
the app's answers, and is ranked by that evidence, strongest first:

1. **dislikes** — by the distinct users who disliked, then the dislikes (a
   thumbs-down is a free negative label, the user's own);
2. **judged bad** — sampled messages a reference-free judge (groundedness,
   relevance) scored 2 or lower;
3. **no retrieval or a refusal** — the app found nothing, or said it could not
   answer;
4. **weak retrieval** — the best context scored very low;

then by users and messages. A cluster with none of these is no bad case and is
left out. For a workflow app (messages with node stages), each disliked message's
first failing node is named (:func:`ragtrack.production.signals.failing_node`),
per cluster and over every disliked message: which node to fix first. A cluster
whose questions are close to a golden item's question is marked as covered by
it: the golden set already tests it, and ``golden propose --from-logs`` does
not propose it again.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

import numpy as np

from ragtrack.production.messages import ProductionMessage
from ragtrack.production.signals import Signals
from ragtrack.production.similarity import QuestionSpace, cluster
from ragtrack.production.thresholds import COVERAGE_SIMILARITY


def normalise_question(question: str) -> str:
    """The form duplicates share: whitespace collapsed, case folded."""
    return " ".join(question.split()).casefold()


@dataclass
class Cluster:
    """Messages that ask one thing, and what they say about the app's answers to it."""

    question: str  # the representative: the form closest to all the others
    questions: list[str]  # every distinct form, most asked first
    message_ids: list[str]
    users: int  # distinct (hashed) end users who asked
    dislikes: int
    dislike_users: int
    likes: int
    judged: int  # messages a judge scored
    judged_bad: int
    no_retrieval: int
    refused: int
    low_retrieval: int
    judge_means: dict[str, float]  # judge → mean 1–5 over the judged messages
    comments: list[str]  # what disliking users wrote, most frequent first
    answers: list[str]  # what the app answered, most frequent first
    failing_nodes: dict[str, int]  # "title (role)" → disliked messages that node failed first, most first
    retrieved: dict[str, int]  # canonical passage → messages whose contexts included it
    apps: list[str]
    first_seen: str
    last_seen: str
    covered_by: str | None = None  # the golden item that already asks it
    nearest_golden: str | None = None
    golden_similarity: float | None = None
    trace_ids: list[str] = field(default_factory=list)

    @property
    def messages(self) -> int:
        return len(self.message_ids)

    @property
    def evidence(self) -> tuple[int, ...]:
        """The ranking key, strongest evidence first (see the module's docstring)."""
        return (
            self.dislike_users,
            self.dislikes,
            self.judged_bad,
            self.no_retrieval + self.refused,
            self.low_retrieval,
            self.users,
            self.messages,
        )

    @property
    def is_bad_case(self) -> bool:
        return any(self.evidence[:5])

    def why(self) -> str:
        """The evidence in words, for a table cell."""
        parts = []
        if self.dislikes:
            parts.append(f"{self.dislikes} dislike(s) from {self.dislike_users} user(s)")
        if self.judged_bad:
            parts.append(f"{self.judged_bad} of {self.judged} judged bad")
        if self.no_retrieval or self.refused:
            parts.append(f"{self.no_retrieval} without retrieval, {self.refused} refused")
        if self.low_retrieval:
            parts.append(f"{self.low_retrieval} weakly retrieved")
        return "; ".join(parts)

    def to_json(self) -> dict:
        data = asdict(self)
        data["messages"] = self.messages
        data["evidence"] = self.why()
        return data


@dataclass
class Triage:
    clusters: list[Cluster]  # bad cases, most evidence first
    messages: int  # read
    judged: int  # of them, scored by a judge
    questions: int  # distinct questions
    all_clusters: int  # clusters of any kind, bad or not
    space: str  # what questions were compared with (QuestionSpace.label)
    failing_nodes: dict[str, int] = field(default_factory=dict)  # over every disliked message (see Cluster)
    disliked_runs: int = 0  # disliked messages with workflow nodes (those failing_nodes can name a node of)


def triage(
    messages: list[ProductionMessage],
    evidence: dict[str, Signals],
    space: QuestionSpace,
    golden: list[tuple[str, str]],
    *,
    similarity: float | None = None,
    coverage: float = COVERAGE_SIMILARITY,
    read_as: dict[tuple[str, str, str], str] | None = None,
) -> Triage:
    """Cluster ``messages`` (with the :class:`Signals` of each, by message ID) and rank the bad cases.

    ``golden`` is ``(item ID, question)`` of the golden set, for coverage. ``similarity`` is the cluster
    threshold; None: the space's own (:attr:`QuestionSpace.threshold`). ``read_as``: message key → the
    question as its conversation makes it (a follow-up's "How do I install it?" after "What is
    ComfyUI-Manager?"), which is what is clustered; a cluster still shows a question as it was asked.
    """
    read_as = read_as or {}
    forms: dict[str, list[ProductionMessage]] = {}
    for m in messages:
        forms.setdefault(normalise_question(read_as.get(m.key, m.question)), []).append(m)
    keys = list(forms)
    first = [forms[k][0] for k in keys]
    vectors = space.fit([read_as.get(m.key, m.question) for m in first]) if keys else np.zeros((0, 1))
    labels = cluster(vectors, space.threshold if similarity is None else similarity)
    golden_vectors = space.project([q for _, q in golden]) if golden and keys else None
    groups: dict[int, list[int]] = {}
    for row, label in enumerate(labels):
        groups.setdefault(label, []).append(row)
    built = []
    for rows in groups.values():
        weights = np.array([len(forms[keys[r]]) for r in rows], dtype=float)
        c = _summary([m for r in rows for m in forms[keys[r]]], evidence)
        c.question = forms[keys[rows[_medoid(vectors[rows], weights)]]][0].question
        if golden_vectors is not None:
            closeness = weights @ (vectors[rows] @ golden_vectors.T) / weights.sum()
            best = int(np.argmax(closeness))
            c.nearest_golden, c.golden_similarity = golden[best][0], round(float(closeness[best]), 3)
            c.covered_by = c.nearest_golden if closeness[best] >= coverage else None
        built.append(c)
    bad = sorted((c for c in built if c.is_bad_case), key=lambda c: (tuple(-e for e in c.evidence), c.question))
    judged = sum(1 for m in messages if evidence[m.message_id].judged)
    runs = [m for m in messages if m.stages and evidence[m.message_id].disliked]
    nodes = _most_first(evidence[m.message_id].failing_node for m in runs)
    return Triage(bad, len(messages), judged, len(keys), len(built), space.label, nodes, len(runs))


def _most_first(names) -> dict[str, int]:
    """Each non-empty name with how often it occurs, most often first (ties by name)."""
    counts = Counter(n for n in names if n)
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _medoid(vectors: np.ndarray, weights: np.ndarray) -> int:
    """The row with the highest weighted mean similarity to the rows (ties: the most asked, then the first)."""
    closeness = (vectors @ vectors.T) @ weights
    return int(max(range(len(weights)), key=lambda r: (round(float(closeness[r]), 9), weights[r], -r)))


def _summary(messages: list[ProductionMessage], evidence: dict[str, Signals]) -> Cluster:
    messages = sorted(messages, key=lambda m: (m.created_at, m.message_id))
    signals = [evidence[m.message_id] for m in messages]
    scores: dict[str, list[int]] = {}
    for s in signals:
        for judge, score in s.judged.items():
            scores.setdefault(judge, []).append(score)
    retrieved: Counter[str] = Counter()
    for m in messages:
        retrieved.update({p for c in m.contexts for p in c.passage_ids})
    disliked = [m for m, s in zip(messages, signals, strict=True) if s.disliked]
    return Cluster(
        question=messages[0].question,
        questions=[q for q, _ in Counter(m.question for m in messages).most_common()],
        message_ids=[m.message_id for m in messages],
        users=len({m.user for m in messages if m.user}),
        dislikes=len(disliked),
        dislike_users=len({m.user or m.message_id for m in disliked}),
        likes=sum(s.liked for s in signals),
        judged=sum(1 for s in signals if s.judged),
        judged_bad=sum(s.judged_bad for s in signals),
        no_retrieval=sum(s.no_retrieval for s in signals),
        refused=sum(s.refused for s in signals),
        low_retrieval=sum(s.low_retrieval for s in signals),
        judge_means={j: round(sum(v) / len(v), 3) for j, v in sorted(scores.items())},
        comments=[c for c, _ in Counter(m.comment for m in disliked if m.comment).most_common()],
        answers=[a for a, _ in Counter(m.answer for m in (disliked or messages)).most_common()],
        failing_nodes=_most_first(evidence[m.message_id].failing_node for m in disliked),
        retrieved=dict(retrieved.most_common()),
        apps=sorted({m.app for m in messages}),
        first_seen=messages[0].created_at,
        last_seen=messages[-1].created_at,
        trace_ids=[m.trace_id for m in messages if getattr(m, "trace_id", None)],
    )
