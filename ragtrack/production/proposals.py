"""A triaged cluster → a golden candidate: the question as users ask it, suggested GT passages and a type.

The suggestions come from two places, and each says which:

* **search** — the question forms of the cluster searched over the corpus's
  canonical passages (:mod:`ragtrack.passage_search`), fused by Reciprocal Rank
  Fusion; a question that asks two things (two sentences, or two clauses joined
  by "and how/what…", "，" before a question word) is also searched part by part;
* **retrieved** — the passages the app itself put in the contexts of at least
  a third of the cluster's messages (two at least), with how many messages had
  them and how many of those users disliked. A passage the app used in answers users disliked is listed but not
  pre-filled as GT: the users said it did not answer them.

The pre-filled ``gt_context_ids`` are the best search hit of each part of the
question, and the suggested type follows from their shape: one passage A, several
in one document B, several documents C. Type D (a clue in one passage leads to
another) is never suggested: only a person can tell a multi-hop question from a
two-part one. Everything here is a suggestion for the reviewer of
``candidates.jsonl``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from ragtrack.corpus import Corpus
from ragtrack.production.triage import Cluster
from ragtrack.text import content_tokens, overlap_units

RRF_K = 60  # as the hybrid retriever fuses
SEARCH_SUGGESTIONS = 5
#: A pre-filled GT is a weak match when no passage of it holds this share of the question's words
#: (English content words, stemmed; Chinese character bigrams): a search always ranks some passage
#: first, even for a question this corpus cannot answer (logs of another app, another domain).
WEAK_MATCH = 0.25
MIN_PART_WORDS = 3  # a part of a question with fewer content words is not searched alone ("Is that normal")
_SENTENCE = re.compile(r"(?<=[.?!;])\s+|(?<=[。？！；])\s*")
_JOINED = re.compile(
    r",?\s+and\s+(?=(?:how|what|which|why|where|when|who|is|are|can|do|does|should)\b)|，(?=(?:怎么|如何|为什么|哪|什么|能不能|是否))",
    re.IGNORECASE,
)


def question_parts(question: str) -> list[str]:
    """The parts of a question that ask something on their own: sentences, and clauses joined by "and
    how…" (or "，怎么…"), each with at least :data:`MIN_PART_WORDS` content words."""
    parts = [p.strip(" ,，") for s in _SENTENCE.split(question) for p in _JOINED.split(s)]
    return [p for p in parts if len(content_tokens(p)) >= MIN_PART_WORDS]


@dataclass(frozen=True)
class Suggestion:
    """One suggested GT passage and where it came from."""

    passage_id: str
    search_rank: int | None  # in the fused search ranking (None: not found by search)
    retrieved: int  # messages of the cluster whose contexts held it
    retrieved_disliked: int  # of those, messages users disliked

    @property
    def marks(self) -> str:
        """``search #2; retrieved by the app in 5/7 messages (5 disliked)``."""
        out = []
        if self.search_rank is not None:
            out.append(f"search #{self.search_rank}")
        if self.retrieved:
            disliked = f" ({self.retrieved_disliked} disliked)" if self.retrieved_disliked else ""
            out.append(f"retrieved by the app in {self.retrieved} message(s){disliked}")
        return "; ".join(out)


def fuse(rankings: list[list[str]]) -> list[str]:
    """Passage IDs by Reciprocal Rank Fusion of several rankings (ties: first seen)."""
    score: dict[str, float] = defaultdict(float)
    for ranking in rankings:
        for rank, pid in enumerate(ranking, start=1):
            score[pid] += 1 / (RRF_K + rank)
    return sorted(score, key=lambda pid: -score[pid])


def suggest(
    cluster: Cluster,
    search: dict[str, list[str]],
    retrieved_disliked: dict[str, int],
    corpus: Corpus,
) -> tuple[list[Suggestion], list[str], str]:
    """(suggestions, pre-filled GT, type) for ``cluster``.

    ``search`` maps each searched text (the cluster's question forms and the parts of the
    representative) to its ranked passage IDs; ``retrieved_disliked`` counts, per passage, the
    cluster's disliked messages whose contexts held it.
    """
    forms = [search[q] for q in cluster.questions if q in search]
    fused = fuse(forms)
    used_badly = {pid for pid, n in retrieved_disliked.items() if n}
    gt: list[str] = []
    parts = question_parts(cluster.question)
    for part in parts if len(parts) > 1 else [cluster.question]:
        ranking = fuse([search[part], *forms]) if part in search and len(parts) > 1 else fused
        best = next((pid for pid in ranking if pid not in used_badly and pid not in gt), None)
        if best is not None:
            gt.append(best)
    ranked = {pid: n for n, pid in enumerate(fused[:SEARCH_SUGGESTIONS], start=1)}
    often = max(2, -(-cluster.messages // 3))  # the app's own answer to the question, not a one-off context
    used = [pid for pid, n in cluster.retrieved.items() if n >= often]
    wanted = list(dict.fromkeys([*fused[:SEARCH_SUGGESTIONS], *gt, *used]))
    suggestions = [
        Suggestion(pid, ranked.get(pid), cluster.retrieved.get(pid, 0), retrieved_disliked.get(pid, 0))
        for pid in wanted
        if pid in corpus.passages
    ]
    gt = sorted(gt, key=lambda pid: (corpus.passages[pid].doc_id, corpus.passages[pid].start))
    return suggestions, gt, suggested_type(gt, corpus)


def match_share(question: str, passage: str) -> float:
    """The share of ``question``'s words (:func:`~ragtrack.text.overlap_units`) found in ``passage``."""
    asked = overlap_units(question)
    return len(asked & overlap_units(passage)) / len(asked) if asked else 0.0


def weak_match(question: str, gt: list[str], corpus: Corpus) -> float | None:
    """The best :func:`match_share` of the pre-filled GT passages when under :data:`WEAK_MATCH` (a
    reviewer should doubt them), else None."""
    best = max((match_share(question, corpus.passages[pid].text) for pid in gt), default=0.0)
    return best if best < WEAK_MATCH else None


def suggested_type(gt: list[str], corpus: Corpus) -> str:
    """A for one passage, B for several of one document, C for several documents (never D)."""
    documents = {corpus.passages[pid].doc_id for pid in gt}
    if len(gt) <= 1:
        return "A"
    return "B" if len(documents) == 1 else "C"
