"""Citation markers and the ID-based citation figures, against values worked out by hand."""

from __future__ import annotations

import pytest

from ragtrack.citation_markers import CitedSentence, cited_sentences, strip_markers, style
from ragtrack.evaluation.citations import score_citations, support_rate


@pytest.mark.parametrize(
    ("answer", "cites"),
    [
        ("Port 8080 is the default [1].", [(0,)]),
        ("Both are supported [1,2].", [(0, 1)]),
        ("Both are supported [1, 3].", [(0, 2)]),
        ("Three steps [1-3].", [(0, 1, 2)]),
        ("Three steps [2–4].", [(1, 2, 3)]),
        ("See the note [^2].", [(1,)]),
        ("默认端口是8080【1】。", [(0,)]),
        ("默认端口是8080。【1】它也支持HTTPS【2、3】。", [(0,), (1, 2)]),
        ("A range backwards [3-1] counts its first number.", [(2,)]),
        ("No citation here.", [()]),
    ],
)
def test_markers_are_read_into_context_positions(answer, cites):
    assert [s.cites for s in cited_sentences(answer)] == cites


def test_ragflow_markers_count_from_zero_and_are_stripped_for_display():
    sentences = cited_sentences("The limit is 10 MB [ID:0]. It applies per file [ID:2].", ("ragflow",))
    assert sentences == [CitedSentence("The limit is 10 MB.", (0,)), CitedSentence("It applies per file.", (2,))]
    assert strip_markers("The limit is 10 MB [ID:0].", ("ragflow",)) == "The limit is 10 MB."


def test_a_marker_after_the_chinese_full_stop_belongs_to_the_sentence_it_closes():
    sentences = cited_sentences("价格是每月5元。【1】退款需要7天；【2】")
    assert sentences == [CitedSentence("价格是每月5元。", (0,)), CitedSentence("退款需要7天；", (1,))]


def test_an_unknown_style_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="numeric, ragflow"):
        style("apa")


def test_figures_by_hand_with_a_mis_cite_between_two_chunks_that_share_a_term():
    # Three contexts handed to the generator: [1] covers GT passage g1, [2] covers n1 (another chunk that
    # mentions the same term, "timeout"), [3] covers g2 and n2. GT = {g1, g2, g3}; g3 was not retrieved.
    contexts = [("g1",), ("n1",), ("g2", "n2")]
    answer = (
        "The timeout defaults to 30 s [1]. "  # right
        "The timeout can be raised per request [2]. "  # mis-cite: [2] mentions timeouts but is not GT
        "Retries follow the timeout [3, 7]. "  # [3] right, [7] names no context
        "Logs are kept for 7 days. "  # a claim without a citation
        "That is all."  # no content word: not a claim
    )
    sentences = cited_sentences(answer)
    scores = score_citations(sentences, contexts, gt={"g1", "g2", "g3"})
    # markers: [1], [2], [3], [7] = 4, of which [7] is out of range → validity 3/4
    assert (scores.markers, scores.valid, scores.validity) == (4, 3, 0.75)
    # claims: the first four sentences carry a content word, three of them cited → coverage 3/4
    assert (scores.claims, scores.cited_claims, scores.coverage) == (4, 3, 0.75)
    # cited passages: g1, n1, g2, n2 → 2 of 4 on GT → precision 0.5
    assert scores.cited_passages == ("g1", "n1", "g2", "n2")
    assert scores.precision == 0.5
    # retrieved ∩ GT = {g1, g2}, both cited → recall given retrieval 1.0 (g3 is retrieval's miss)
    assert scores.recall == 1.0
    # support by IDs: sentences 0 and 2 cite a GT context; sentence 1 only a non-GT one → the judge's
    assert (scores.supported, scores.unsupported, scores.undecided) == (2, 0, (1,))
    assert support_rate(scores, {}) is None  # a verdict it needs is missing
    assert support_rate(scores, {1: False}) == pytest.approx(2 / 3)
    assert support_rate(scores, {1: True}) == 1.0


def test_chinese_answer_with_only_out_of_range_markers():
    contexts = [("p1",), ("p2",)]
    sentences = cited_sentences("产品支持三种部署方式【5】。价格另议【9】。")
    scores = score_citations(sentences, contexts, gt={"p1"})
    assert (scores.markers, scores.valid, scores.validity) == (2, 0, 0.0)
    assert scores.precision is None  # nothing valid was cited
    assert scores.recall == 0.0  # p1 was handed to the generator and not cited
    assert (scores.supported, scores.unsupported, scores.undecided) == (0, 2, ())
    assert support_rate(scores, {}) == 0.0


def test_a_refusal_claims_nothing_and_a_generation_miss_shows_in_recall_not_in_retrieval():
    refusal = score_citations(cited_sentences("抱歉，知识库中没有找到相关内容。"), [("p1",)], {"p1"}, declined=True)
    assert (refusal.claims, refusal.coverage, refusal.validity) == (0, None, None)
    assert refusal.recall == 0.0  # the GT passage was there to cite
    # Nothing retrieved on GT: recall given retrieval has no denominator.
    assert score_citations(cited_sentences("It is 5 [1]."), [("x",)], {"p1"}).recall is None
