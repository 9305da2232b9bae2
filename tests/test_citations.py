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


# ------------------------------------------------------------------------ end to end
def plant_markers(answer: str, chunks: list[str]) -> str:
    """A RAGFlow assistant whose answer cites right, mis-cites and cites out of range, in that order:
    [ID:i] on the chunk that states the cfg default, [ID:j] on another retrieved chunk that also mentions
    "cfg" (a mis-cite between two chunks sharing a term) or else the next one, and [ID:9], which names
    no chunk."""
    right = next(i for i, c in enumerate(chunks) if "cfg value defaults" in c)
    other = next((i for i, c in enumerate(chunks) if i != right and "cfg" in c.lower()), (right + 1) % len(chunks))
    return (
        f"The cfg value defaults to 8.0 [ID:{right}]. "
        f"The cfg value also sets how closely the prompt is followed [ID:{other}]. "
        "It has no effect on the number of steps [ID:9]."
    )


def test_ragflow_markers_are_scored_against_gt_by_hand_and_kept_out_of_the_answer(project, monkeypatch):
    from ragtrack.api import evaluate
    from ragtrack.testing.ragflow_server import RagflowServer

    monkeypatch.setenv("RAGFLOW_KEY", "ragflow-citation-key")
    (project / "golden" / "golden.jsonl").write_text(
        (project / "golden" / "golden.jsonl").read_text().splitlines()[0] + "\n"  # a1: the cfg default
    )
    with RagflowServer(project / "golden" / "kb", api_key="ragflow-citation-key", cites=plant_markers) as server:
        (project / "pipelines" / "ragflow-cites.toml").write_text(
            '[version]\nname = "ragflow-cites"\n\n[agent]\nkind = "ragflow"\n'
            f'base_url = "{server.base_url}"\napi_key_env = "RAGFLOW_KEY"\nchat_id = "{server.chat_id}"\n'
        )
        report = evaluate("ragflow-cites", root=project)
    (record,) = report.records
    assert "[ID:" not in record.answer and record.cited_answer.count("[ID:") == 3
    chunks = [c.text for c in record.contexts]
    right = next(i for i, c in enumerate(chunks) if "cfg value defaults" in c)
    other = int(record.cited_answer.split("[ID:")[2].split("]")[0])
    gt = set(record.gt_context_ids)
    cited = list(dict.fromkeys([*record.contexts[right].passage_ids, *record.contexts[other].passage_ids]))
    retrieved_gt = gt & {p for c in record.contexts for p in c.passage_ids}
    # By hand: 3 markers, [ID:9] names no chunk (2 were returned); 3 claims, all cited; the cited chunks
    # cover 4 passages, one of them GT (precision 1/4), and that is the one GT passage retrieved (recall 1).
    assert record.citations["validity"] == pytest.approx(2 / 3)
    assert record.citations["coverage"] == 1.0
    assert len(cited) == 4 and record.citations["precision"] == pytest.approx(len(gt & set(cited)) / len(cited)) == 0.25
    assert record.citations["recall"] == pytest.approx(len(gt & set(cited)) / len(retrieved_gt)) == 1.0
    assert list(record.contexts[other].passage_ids) == ["guides/sampler.md#sampler-guide/guidance/negative-prompt"]
    # Support: sentence 1 cites the GT chunk (supported by IDs), sentence 3 names no chunk (unsupported),
    # sentence 2 cites the negative-prompt chunk, which says nothing of cfg: the judge is asked, and the
    # offline one (word support in the cited chunk) finds it unsupported → 1 of 3.
    assert record.citations["support"] == pytest.approx(1 / 3)
    assert record.usage["judge"]["judge.citation_support"].calls == 0  # offline: asked of no model, still accounted

    assert report.metrics["citation/validity"] == pytest.approx(2 / 3)


def test_v5_with_cite_marks_every_sentence_with_the_context_it_came_from(project):
    """The offline extractive answer takes each sentence from one context and says which: every marker
    is valid, every sentence is cited, and precision is the GT share of the passages of the contexts cited."""
    from ragtrack.api import evaluate
    from ragtrack.citation_markers import cited_sentences

    spec = (project / "pipelines" / "v5.toml").read_text().replace('name = "v5"', 'name = "v5-cite"')
    (project / "pipelines" / "v5-cite.toml").write_text(
        spec.replace("max_sentences = 4", "max_sentences = 4\ncite = true")
    )
    report = evaluate("v5-cite", root=project)
    assert report.params["spec.generation.cite"] == "True"
    for r in report.records:
        sentences = cited_sentences(r.cited_answer)
        assert all(len(s.cites) == 1 for s in sentences) and "[" not in r.answer, r.id
        cited = list(dict.fromkeys(p for s in sentences for p in r.contexts[s.cites[0]].passage_ids))
        gt = set(r.gt_context_ids)
        assert r.citations["validity"] == 1.0 and r.citations["coverage"] == 1.0, r.id
        assert r.citations["precision"] == pytest.approx(len(gt & set(cited)) / len(cited)), r.id
    assert report.metrics["citation/coverage"] == 1.0
