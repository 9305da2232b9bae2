"""The triage benchmark: its purity and completeness against hand-computed values and scikit-learn,
its labelled set as described, and the product's default clustering scored on it.

The figures asserted are the ones docs/benchmarks.md reports for the default; the issue's target
(purity and completeness ≥ 0.9) is met for purity only — see docs/benchmarks.md for why the
completeness stays lower (the shipped traffic's problems would absorb good questions first).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import homogeneity_completeness_v_measure

from ragtrack.errors import RagtrackError
from ragtrack.production.similarity import CLUSTER_SIMILARITY, WORDING_SIMILARITY, QuestionSpace
from ragtrack.testing import triage_benchmark as tb

SET = Path(__file__).resolve().parent.parent / "benchmarks" / "data" / "triage_paraphrases.jsonl"


def test_purity_and_completeness_by_hand():
    # problem a asked 4 times, b twice, x and y unrelated; a is split 3 + 1 and its stray copy sits with
    # both b's and x: clusters {a a a} {a b b x} {y}.
    truth = ["a", "a", "a", "a", "b", "b", "x", "y"]
    labels = [0, 0, 0, 1, 1, 1, 1, 2]
    s = tb.score(truth, labels, {"a", "b"})
    # purity: 3 (a) + 2 (b) + 1 (y) credited of 8; completeness: a 3 of 4, b 2 of 2 → 5 of 6
    assert (s.pure, s.questions, s.complete, s.labelled) == (6, 8, 5, 6)
    assert s.purity == pytest.approx(0.75) and s.completeness == pytest.approx(5 / 6)
    # the cases: a problem of six split 4 + 2, and one that absorbed an unrelated question
    split = tb.score(["p"] * 6, [0, 0, 0, 0, 1, 1], {"p"})
    assert (split.purity, split.completeness) == (1.0, pytest.approx(4 / 6))
    absorbed = tb.score(["p"] * 5 + ["u"], [0] * 6, {"p"})
    assert (absorbed.purity, absorbed.completeness) == (pytest.approx(5 / 6), 1.0)
    # pooling adds the counts, not the ratios
    both = s + split
    assert both.purity == pytest.approx((6 + 6) / (8 + 6)) and both.completeness == pytest.approx((5 + 4) / (6 + 6))


def test_exact_problems_by_hand():
    def q(i, problem):
        return tb.Question(f"q{i}", "en", "tune", "paraphrase" if problem else "unrelated", problem, f"question {i}")

    questions = [q(0, "a"), q(1, "a"), q(2, "b"), q(3, "b"), q(4, None), q(5, "c")]
    assert tb.exact_problems(questions, [0, 0, 1, 1, 2, 3]) == (3, 3)
    assert tb.exact_problems(questions, [0, 0, 1, 1, 1, 3]) == (2, 3)  # b absorbed the unrelated one
    assert tb.exact_problems(questions, [0, 5, 1, 1, 2, 3]) == (2, 3)  # a split


@pytest.mark.parametrize(
    ("labels", "ours", "theirs"),
    [
        ([0, 0, 0, 1, 1, 2, 3], (1.0, 1.0), (1.0, 1.0)),  # the truth itself
        ([0, 1, 2, 3, 4, 5, 6], (1.0, 2 / 5), (1.0, None)),  # every question alone: pure, incomplete
        ([0, 0, 0, 0, 0, 0, 0], (3 / 7, 1.0), (None, 1.0)),  # one cluster: complete, impure
    ],
)
def test_the_extremes_agree_with_scikit_learn(labels, ours, theirs):
    """scikit-learn's homogeneity and completeness are entropy-based, so only their extremes match ours:
    homogeneity is 1 exactly when purity is, completeness 1 exactly when every problem is whole."""
    truth = ["a", "a", "a", "b", "b", "x", "y"]
    s = tb.score(truth, labels, {"a", "b"})
    assert (s.purity, s.completeness) == (pytest.approx(ours[0]), pytest.approx(ours[1]))
    h, c, _ = homogeneity_completeness_v_measure(truth, labels)
    for mine, sk, expected in ((s.purity, h, theirs[0]), (s.completeness, c, theirs[1])):
        if expected is None:
            assert mine < 1 or sk < 1
        else:
            assert sk == pytest.approx(expected) and mine == pytest.approx(1.0)


def test_the_set_is_what_the_benchmark_says():
    questions = tb.load_set(SET)
    assert len({q.question for q in questions}) == len(questions)
    for language in tb.LANGUAGES:
        mine = [q for q in questions if q.language == language]
        sizes = Counter(q.problem for q in mine if q.problem)
        assert len(sizes) >= 8 and all(5 <= n <= 10 for n in sizes.values()), sizes
        halves = {split: {q.problem for q in mine if q.split == split and q.problem} for split in tb.SPLITS}
        assert not halves["tune"] & halves["held-out"] and all(len(h) >= 4 for h in halves.values())
        for split in tb.SPLITS:
            kinds = Counter(q.kind for q in mine if q.split == split)
            assert kinds["near-miss"] >= 5 and kinds["unrelated"] >= 5, (language, split, kinds)
    rows = [json.loads(line) for line in SET.read_text(encoding="utf-8").splitlines()]
    problems = {(r["language"], r["split"], r["problem"]) for r in rows if r["problem"]}
    assert all((r["language"], r["split"], r["near"]) in problems for r in rows if r["kind"] == "near-miss")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("not json", "not JSON"),
        ('{"id": "x", "language": "fr", "split": "tune", "kind": "unrelated", "question": "q"}', "'language'"),
        ('{"id": "x", "language": "en", "split": "tune", "kind": "paraphrase", "question": "q"}', "'problem'"),
        ('{"id": "x", "language": "en", "split": "tune", "kind": "unrelated", "question": ""}', "'question'"),
    ],
)
def test_a_malformed_row_is_named_by_line_and_field(tmp_path, row, message):
    good = '{"id": "a", "language": "en", "split": "tune", "kind": "unrelated", "problem": null, "question": "q?"}'
    path = tmp_path / "set.jsonl"
    path.write_text(f"{good}\n{row}\n", encoding="utf-8")
    with pytest.raises(RagtrackError, match=rf"set\.jsonl:2: .*{message}"):
        tb.load_set(path)


@pytest.fixture(scope="module")
def measured(embedder):
    """The set and the shipped traffic clustered as the product does by default (English by MiniLM +
    wording, Chinese by wording alone), and by the space before the benchmark (meaning 0.5, 0.35).
    MiniLM encodes some 190 English questions per space: seconds on a quiet machine."""
    questions = tb.load_set(SET) + [q for lang in tb.LANGUAGES for q in tb.shipped_traffic(lang)]
    methods = [
        tb.Method("now", lambda lang: QuestionSpace(embedder if lang == "en" else None, lang)),
        tb.Method("before", lambda lang: QuestionSpace(embedder if lang == "en" else None, lang, 0.5)),
    ]
    thresholds = sorted(
        {round(t, 3) for t in (CLUSTER_SIMILARITY, WORDING_SIMILARITY, 0.35, CLUSTER_SIMILARITY - 0.025)}
    )
    return tb.sweep(questions, methods, thresholds)


def test_the_default_keeps_every_shipped_problem_exact_with_a_margin(measured):
    assert measured["exact", "now", "en", "traffic", CLUSTER_SIMILARITY] == (6, 6)
    assert tb.traffic_holds(measured, "now", "en", CLUSTER_SIMILARITY)


def test_the_default_on_the_set_is_pure_and_more_complete_than_before(measured):
    now = {
        (lang, split): measured["now", lang, split, CLUSTER_SIMILARITY if lang == "en" else WORDING_SIMILARITY]
        for lang in tb.LANGUAGES
        for split in tb.SPLITS
    }
    before = {(lang, split): measured["before", lang, split, 0.35] for lang in tb.LANGUAGES for split in tb.SPLITS}
    assert all(s.purity >= 0.9 for s in now.values()), now
    for split in tb.SPLITS:  # English: more paraphrases together on both halves, purity still ≥ 0.9
        assert now["en", split].completeness > before["en", split].completeness
    # the figures docs/benchmarks.md reports
    figures = {k: (round(s.purity, 2), round(s.completeness, 2)) for k, s in now.items()}
    assert figures == {
        ("en", "tune"): (1.0, 0.63),
        ("en", "held-out"): (0.93, 0.82),
        ("zh", "tune"): (1.0, 0.2),
        ("zh", "held-out"): (0.91, 0.38),
    }


def test_nearest_neighbour_links_by_hand():
    # a and b are each other's nearest (cos 0.8), c's nearest is b (cos 0.6), d's nearest is c (cos 0.3)
    a, b = np.array([1.0, 0.0, 0.0]), np.array([0.8, 0.6, 0.0])
    vectors = np.array([a, b, [0.0, 1.0, 0.0], [0.0, 0.3, np.sqrt(1 - 0.09)]])
    c = vectors[2]
    assert a @ b == pytest.approx(0.8) and b @ c == pytest.approx(0.6) and a @ c == 0.0
    assert vectors[3] @ c == pytest.approx(0.3) and vectors[3] @ b == pytest.approx(0.18)
    assert tb.nearest_neighbour_cluster(vectors, 0.5) == [0, 0, 0, 1]  # d's best link is below 0.5
    assert tb.nearest_neighbour_cluster(vectors, 0.25) == [0, 0, 0, 0]
    assert tb.nearest_neighbour_cluster(vectors, 0.7) == [0, 0, 1, 2]  # only a–b is that close
    assert tb.nearest_neighbour_cluster(vectors[:1], 0.5) == [0]


def test_the_knowledge_base_view_is_reciprocal_ranks_and_weighs_in(tiny_corpus, tmp_path):
    questions = ["where do full checkpoints go", "what does the cfg value do", "how many steps"]
    space = tb.KnowledgeBaseSpace(QuestionSpace(None, "en"), tiny_corpus, 0.2, depth=3, cache_dir=tmp_path)
    view = space.view(questions)
    ids = list(tiny_corpus.passages)
    for row, question in zip(view, questions, strict=True):
        hits = space.search.search(question, 3)
        expected = np.zeros(len(ids))
        for hit in hits:
            expected[ids.index(hit.passage_id)] = 1 / hit.rank
        assert row == pytest.approx(expected / np.linalg.norm(expected))
    assert ids[int(view[0].argmax())].endswith("checkpoints")
    own = QuestionSpace(None, "en").fit(questions)
    joined = space.fit(questions)
    assert joined @ joined.T == pytest.approx(0.8 * (own @ own.T) + 0.2 * (view @ view.T))
