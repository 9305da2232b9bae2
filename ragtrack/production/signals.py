"""What one production message says about itself without a judge: refused, retrieved nothing, retrieved
weakly — and which messages a sampled judge reads.

Triage and the monitor share these, so a message is a refusal, a "no
retrieval" or "in the sample" by one rule everywhere. Sampling is by a hash of
the message's identity, not a random draw: the same messages are judged on
every run at a rate (a rerun resumes instead of judging others), and a higher
rate judges a superset of a lower one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ragtrack.agents.workflow import FAILED
from ragtrack.evaluation.judges import JudgeInput
from ragtrack.evaluation.nodes import first_failing, ran_retrievals, role_stages
from ragtrack.production.messages import ProductionMessage
from ragtrack.production.thresholds import LOW_RETRIEVAL_SCORE
from ragtrack.records import ItemRecord, JudgeRecord
from ragtrack.text import is_refusal

#: The judges that need no GT answer: what production traffic can be scored with.
REFERENCE_FREE = ("groundedness", "relevance")
#: A judge score at or below this (1–5) counts as a bad answer.
BAD_SCORE = 2


def top_retrieval_score(message: ProductionMessage) -> float | None:
    scores = [c.score for c in message.contexts if c.score is not None]
    return max(scores) if scores else None


@dataclass(frozen=True)
class Signals:
    """A message's evidence of being a bad case, before and after judging."""

    disliked: bool
    liked: bool
    no_retrieval: bool
    refused: bool
    low_retrieval: bool  # contexts came back, the best of them below the threshold
    judged: dict[str, int]  # judge → 1–5 score, for the judges that scored it (empty: not in the sample)
    failing_node: str = ""  # a workflow run's first failing node, "title (role)" ("" none seen, or no nodes)

    @property
    def judged_bad(self) -> bool:
        return any(score <= BAD_SCORE for score in self.judged.values())


def signals(message: ProductionMessage, judged: dict[str, int] | None = None, low_score: float = LOW_RETRIEVAL_SCORE):
    top = top_retrieval_score(message)
    return Signals(
        disliked=message.rating == "dislike",
        liked=message.rating == "like",
        no_retrieval=not message.contexts,
        refused=is_refusal(message.answer),
        low_retrieval=top is not None and top < low_score,
        judged=dict(judged or {}),
        failing_node=failing_node(message, judged or {}),
    )


def failing_node(message: ProductionMessage, judged: dict[str, int]) -> str:
    """The first node of a workflow run that failed it, as ``title (role)`` ("" when none visibly did,
    or the message has no nodes): :func:`~ragtrack.evaluation.nodes.first_failing` on what production
    shows — a node that failed, every retrieval node finding nothing (there is no GT), a generation
    judged below 3 — with no golden intent or must-keep terms to hold the rewrite and intent to."""
    if not message.stages:
        return ""
    failed = any(s.node.get("status") in FAILED for s in message.stages)
    verdicts = {j: JudgeRecord(score, (score - 1) / 4, "") for j, score in judged.items()}
    record = ItemRecord(
        message.message_id,
        "",
        message.question,
        [],
        "",
        message.answer,
        message.contexts,
        {},
        verdicts,
        stages=message.stages,
        answered=not failed,
    )
    role = first_failing(record, unreferenced=True)
    stages = role_stages(record, role) if role else []
    if not stages:
        return ""
    stage = next((s for s in stages if s.node.get("status") in FAILED), stages[-1])
    return f"{stage.name} ({role})"


def sample_point(message: ProductionMessage) -> float:
    """Where the message falls in [0, 1): it is in a sample of rate ``r`` when this is below ``r``."""
    digest = hashlib.sha256("\0".join(message.key).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def in_sample(message: ProductionMessage, rate: float) -> bool:
    return sample_point(message) < rate


def judge_input(message: ProductionMessage) -> JudgeInput:
    """What a reference-free judge reads: the question, the answer, the contexts the app used (no GT)."""
    return JudgeInput(message.question, message.answer, "", tuple(c.text for c in message.contexts))


def judges_for(message: ProductionMessage) -> tuple[str, ...]:
    """The reference-free judges that can read this message: groundedness only when the app said what it
    retrieved (against no contexts every claim looks unsupported) — a workflow's retrieval node that ran
    and found nothing says so, and is judged as an eval judges it; none for a workflow run that failed
    (no answer to judge: an eval judges no unanswered item either)."""
    if any(s.node.get("status") in FAILED for s in message.stages):
        return ()
    retrieved = bool(message.contexts or ran_retrievals(message))
    return tuple(j for j in REFERENCE_FREE if retrieved or j != "groundedness")
