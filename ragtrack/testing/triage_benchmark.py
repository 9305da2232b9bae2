"""How well does triage's clustering put paraphrases of one problem together, and nothing else with them?

The labelled set (``benchmarks/data/triage_paraphrases.jsonl``, written for this benchmark) holds
questions users might ask a help desk: English ones about the shipped ComfyUI knowledge base
(``golden/kb``) and Chinese ones about the example smart-home one (``examples/zh-kb``). Each row has
``id``, ``language``, ``split`` (``tune`` or ``held-out``), ``kind`` (``paraphrase``, ``near-miss``:
the same topic as a problem but another problem, or ``unrelated``), ``problem`` (the label every
paraphrase of one problem shares; null for the others, each of which is a problem of its own) and
``question``. Problems are split in two halves: thresholds are chosen on ``tune`` and reported on
``held-out`` too, so a choice that only fits the questions it was chosen on shows.

Each (language, split) part is clustered as one batch, as triage clusters one project's messages:
:class:`ragtrack.production.similarity.QuestionSpace` then
:func:`ragtrack.production.similarity.cluster`, the very functions ``ragtrack logs triage`` calls.

Two figures, both between 0 and 1, both 1 for a perfect clustering:

* **purity** — each cluster is credited with the questions of its most frequent problem; purity is
  the credited questions over all questions. A cluster that absorbs an unrelated question, or two
  problems merged, lowers it. Every question counts (unrelated ones are problems of one question).
* **completeness** — each labelled problem (``problem`` not null) is credited with its questions in
  the one cluster holding most of them; completeness is the credited questions over all labelled
  questions. A problem split 4 + 2 scores 4/6. Unrelated questions are left out: a problem of one
  question is complete by construction and would only flatter the figure.

Putting every question alone gives purity 1 and completeness ≈ 1/(paraphrases per problem); one
cluster of everything gives completeness 1 and a low purity: only both together say anything.
Overall figures pool the counts of the parts (credited over all), they are not a mean of means.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ragtrack.errors import RagtrackError

LANGUAGES = ("en", "zh")
SPLITS = ("tune", "held-out")
KINDS = ("paraphrase", "near-miss", "unrelated")
#: The cluster thresholds tried (cosine in the question space).
THRESHOLDS = tuple(round(0.1 + 0.025 * i, 3) for i in range(17))  # 0.1 … 0.5


@dataclass(frozen=True)
class Question:
    id: str
    language: str
    split: str
    kind: str
    problem: str | None
    question: str

    @property
    def truth(self) -> str:
        """The problem this question belongs to; an unlabelled question is a problem of its own."""
        return self.problem or self.id


def load_set(path: str | Path) -> list[Question]:
    """The labelled questions of ``path``; one error naming the line and field of a malformed row."""
    path = Path(path)
    rows, seen = [], {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as e:
            raise RagtrackError(f"{where}: not JSON ({e.msg})") from None
        if not isinstance(data, dict):
            raise RagtrackError(f"{where}: a row must be a JSON object")
        for key, allowed in (("language", LANGUAGES), ("split", SPLITS), ("kind", KINDS)):
            if data.get(key) not in allowed:
                raise RagtrackError(
                    f"{where}: field {key!r} must be one of {', '.join(allowed)}, not {data.get(key)!r}"
                )
        for key in ("id", "question"):
            if not isinstance(data.get(key), str) or not data[key].strip():
                raise RagtrackError(f"{where}: field {key!r} must be a non-empty string")
        problem = data.get("problem")
        if (problem is None) != (data["kind"] != "paraphrase") or (
            problem is not None and not isinstance(problem, str)
        ):
            raise RagtrackError(
                f"{where}: field 'problem' must name the problem of a paraphrase, and be null otherwise"
            )
        for key in ("id", "question"):
            if (key, data[key]) in seen:
                raise RagtrackError(f"{where}: field {key!r} repeats line {seen[key, data[key]]}")
            seen[key, data[key]] = n
        rows.append(
            Question(data["id"], data["language"], data["split"], data["kind"], problem, data["question"].strip())
        )
    return rows


@dataclass(frozen=True)
class Score:
    """Credited questions over the questions counted, for purity and for completeness (see the module)."""

    pure: int
    questions: int
    complete: int
    labelled: int

    @property
    def purity(self) -> float:
        return self.pure / self.questions if self.questions else 1.0

    @property
    def completeness(self) -> float:
        return self.complete / self.labelled if self.labelled else 1.0

    def __add__(self, other: Score) -> Score:
        return Score(
            self.pure + other.pure,
            self.questions + other.questions,
            self.complete + other.complete,
            self.labelled + other.labelled,
        )


def score(truth: list[str], labels: list[int], labelled: Iterable[str]) -> Score:
    """Purity and completeness of cluster ``labels`` against the ``truth`` problem of each question;
    completeness over the problems named in ``labelled`` only."""
    if len(truth) != len(labels):
        raise ValueError(f"{len(truth)} truths for {len(labels)} labels")
    joint = Counter(zip(labels, truth, strict=True))
    best_in_cluster: dict[int, int] = {}
    best_of_problem: dict[str, int] = {}
    for (label, problem), n in joint.items():
        best_in_cluster[label] = max(best_in_cluster.get(label, 0), n)
        best_of_problem[problem] = max(best_of_problem.get(problem, 0), n)
    labelled = set(labelled)
    return Score(
        pure=sum(best_in_cluster.values()),
        questions=len(truth),
        complete=sum(best_of_problem[p] for p in labelled if p in best_of_problem),
        labelled=sum(1 for t in truth if t in labelled),
    )


def score_part(questions: list[Question], labels: list[int]) -> Score:
    return score([q.truth for q in questions], labels, {q.problem for q in questions if q.problem})


def exact_problems(questions: list[Question], labels: list[int]) -> tuple[int, int]:
    """(problems found exactly — all their questions in one cluster with nothing else —, problems)."""
    members: dict[int, set[str]] = {}
    for q, label in zip(questions, labels, strict=True):
        members.setdefault(label, set()).add(q.truth)
    problems = {q.problem for q in questions if q.problem}
    clusters_of = {p: {label for q, label in zip(questions, labels, strict=True) if q.problem == p} for p in problems}
    exact = sum(1 for p, found in clusters_of.items() if len(found) == 1 and members[next(iter(found))] == {p})
    return exact, len(problems)


def shipped_traffic(language: str) -> list[Question]:
    """The seeded traffic's distinct questions (:mod:`ragtrack.testing.traffic`) as a part of split
    ``traffic``: its six problems labelled, every other question a problem of its own. Its problems'
    paraphrases are close and its good traffic asks about the same features, so it checks the other
    side: a threshold low enough for the loose paraphrases of the set must not make a problem absorb
    a good question here."""
    from ragtrack.production.triage import normalise_question
    from ragtrack.testing.traffic import traffic_plan

    forms: dict[str, str | None] = {}
    questions: dict[str, str] = {}
    for m in traffic_plan(language).messages():
        key = normalise_question(m.question)
        forms.setdefault(key, m.problem)
        questions.setdefault(key, m.question)
    return [
        Question(f"traffic-{language}-{n}", language, "traffic", "paraphrase" if p else "unrelated", p, questions[k])
        for n, (k, p) in enumerate(forms.items())
    ]


def richer_units(text: str) -> list[str]:
    """Wording units tried against the product's (:func:`ragtrack.production.similarity.question_units`):
    those plus English character trigrams of each content word (so "chekpoint" meets "checkpoint"), or
    plus single Han characters and jieba words (so "固件更新" meets "升级固件" by 固件)."""
    import re

    from ragtrack.production.similarity import question_units
    from ragtrack.text import content_tokens, is_chinese

    units = question_units(text)
    if is_chinese(text):
        han = [ch for ch in re.sub(r"\W", "", text.lower()) if not ch.isascii()]
        return units + [f"c:{ch}" for ch in han] + [f"w:{w}" for w in content_tokens(text)]
    grams = []
    for word in content_tokens(text):
        padded = f" {word} "
        grams.extend(f"g:{padded[i : i + 3]}" for i in range(len(padded) - 2))
    return units + grams


def parts(questions: list[Question]) -> dict[tuple[str, str], list[Question]]:
    """The set by (language, split), in the set's order: each part is clustered as one batch."""
    out: dict[tuple[str, str], list[Question]] = {}
    for q in questions:
        out.setdefault((q.language, q.split), []).append(q)
    return out


def nearest_neighbour_cluster(vectors: np.ndarray, similarity: float) -> list[int]:
    """A cluster label per row: each question linked to its single nearest other question when their
    cosine is at least ``similarity``, clusters the connected groups. Tried against average linkage
    (:func:`ragtrack.production.similarity.cluster`): a paraphrase's nearest question is usually of its
    own problem even when its mean similarity to the others is low."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    n = len(vectors)
    if n < 2:
        return [0] * n
    similarities = vectors @ vectors.T
    np.fill_diagonal(similarities, -np.inf)
    nearest = similarities.argmax(axis=1)
    keep = similarities[np.arange(n), nearest] >= similarity - 1e-9
    rows, cols = np.arange(n)[keep], nearest[keep]
    graph = coo_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n))
    return [int(label) for label in connected_components(graph, directed=False)[1]]


class KnowledgeBaseSpace:
    """A question space joined with a knowledge-base view: a question's vector there holds 1/rank for
    each of the ``depth`` passages BM25 ranks first for it (:class:`ragtrack.passage_search.PassageSearch`),
    so two questions answered by the same passages are alike even when worded apart. ``weight`` is the
    view's share of a cosine; the space's own vectors have the rest."""

    def __init__(self, space, corpus, weight: float, depth: int = 5, cache_dir: Path | None = None):
        from ragtrack.passage_search import PassageSearch

        self.space, self.weight, self.depth = space, weight, depth
        self.passages = {pid: n for n, pid in enumerate(corpus.passages)}
        self.search = PassageSearch(corpus, cache_dir or Path(".ragtrack/cache"), "bm25")

    def view(self, questions: list[str]) -> np.ndarray:
        rows = np.zeros((len(questions), len(self.passages)))
        for row, question in enumerate(questions):
            for hit in self.search.search(question, self.depth):
                rows[row, self.passages[hit.passage_id]] = 1.0 / hit.rank
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        return rows / np.where(norms == 0, 1.0, norms)

    def fit(self, questions: list[str]) -> np.ndarray:
        own = self.space.fit(questions)
        return np.hstack([own * np.sqrt(1 - self.weight), self.view(questions) * np.sqrt(self.weight)])


@dataclass(frozen=True)
class Method:
    """One way to compare questions: ``space(language)`` builds a fresh QuestionSpace (None: not
    available for that language here), ``clustering`` groups its vectors at a threshold (the product's
    average linkage unless said)."""

    name: str
    space: Callable[[str], object | None]
    clustering: Callable[[np.ndarray, float], list[int]] | None = None


def sweep(
    questions: list[Question],
    methods: list[Method],
    thresholds: Iterable[float] = THRESHOLDS,
    progress: Callable[[str], None] = lambda line: None,
) -> dict[tuple[str, str, str, float], Score]:
    """Score of every (method, language, split, threshold); a batch is embedded once per method."""
    from ragtrack.production.similarity import cluster

    thresholds = list(thresholds)
    results = {}
    for method in methods:
        for (language, split), part in parts(questions).items():
            space = method.space(language)
            if space is None:
                continue
            progress(f"{method.name}: {language} {split} ({len(part)} questions)")
            vectors = space.fit([q.question for q in part])
            for t in thresholds:
                labels = (method.clustering or cluster)(vectors, t)
                results[method.name, language, split, t] = score_part(part, labels)
                results["exact", method.name, language, split, t] = exact_problems(part, labels)
    return results


def pooled(results: dict, split: str, choices: Iterable[tuple[str, str, float]]) -> Score | None:
    """The pooled score on ``split`` of (method, language, threshold) ``choices`` (None: one not measured)."""
    scores = [results.get((method, language, split, threshold)) for method, language, threshold in choices]
    if not scores or any(s is None for s in scores):
        return None
    total = scores[0]
    for s in scores[1:]:
        total = total + s
    return total


def traffic_holds(results: dict, method: str, language: str, threshold: float) -> bool:
    """Whether the shipped traffic's problems are all exact at ``threshold`` and one step below it (a
    margin: a threshold that only just holds breaks on the next traffic)."""
    step = THRESHOLDS[1] - THRESHOLDS[0]
    for t in (threshold, round(threshold - step, 3)):
        found = results.get(("exact", method, language, "traffic", t))
        if found is None or found[0] != found[1]:
            return False
    return True


def best_threshold(
    results: dict, method: str, languages: Iterable[str], split: str = "tune", traffic: bool = True
) -> float | None:
    """The threshold whose lower of pooled purity and completeness over ``languages`` on ``split`` is
    highest (ties: the higher threshold, the more cautious merge), among those the shipped traffic
    holds at when ``traffic`` (:func:`traffic_holds`); None when none."""
    languages = list(languages)
    scored = [
        (worst(s), t)
        for t in THRESHOLDS
        if (not traffic or all(traffic_holds(results, method, language, t) for language in languages))
        and (s := pooled(results, split, [(method, language, t) for language in languages])) is not None
    ]
    return max(scored)[1] if scored else None


def worst(s: Score) -> float:
    """The figure a choice maximises: the lower of purity and completeness."""
    return min(s.purity, s.completeness)
