"""Platform contexts → canonical passages: ID table, then text (with what platforms change), else unmapped.

Expected passages and shares are computed by hand from tests/data/kb (character
offsets in the comments come from its files).
"""

from __future__ import annotations

import json

import pytest

from ragtrack.agent import AgentOutput, RetrievedContext
from ragtrack.agents.mapping import ContextMapper, IdTable, PlatformContext, id_table_path, normalise
from ragtrack.corpus import load_corpus
from ragtrack.errors import InputError
from ragtrack.evaluation.retrieval_metrics import retrieval_scores
from ragtrack.records import passage_groups

GUIDE = "guides/sampler.md#sampler-guide"
STEPS = "guides/sampler.md#sampler-guide/steps"
CFG = "guides/sampler.md#sampler-guide/guidance/cfg-value"
NEGATIVE = "guides/sampler.md#sampler-guide/guidance/negative-prompt"


@pytest.fixture
def mapper(tiny_corpus):
    return ContextMapper(tiny_corpus, min_overlap=0.5)


def mapped(mapper, text, **kw):
    ctx = mapper.map(PlatformContext("seg", text, **kw))
    return list(ctx.passage_ids), ctx.mapping


def test_normalise_keeps_letters_and_digits_with_their_offsets():
    text = "## Ｃｆｇ Value：8．0\n- **item**"
    norm, offsets = normalise(text)
    assert norm == "cfgvalue80item"  # heading mark, bullet, emphasis, spaces, full-width forms gone
    assert [text[i] for i in offsets[:3]] == ["Ｃ", "ｆ", "ｇ"] and text[offsets[-1]] == "m"


def test_a_segment_inside_one_passage_maps_to_it(mapper):
    assert mapped(mapper, "The steps setting defaults to 20.") == ([STEPS], "text 1.00")
    # The cfg section's heading and the first half of its body: the span [201, 241) lies inside
    # the passage [197, 286), so the overlap is the whole (shorter) segment.
    assert mapped(mapper, "### Cfg value\n\nThe cfg value defaults to 8.0") == ([CFG], "text 1.00")


def test_a_segment_spanning_two_passages_maps_to_both_by_the_min_overlap_rule(mapper):
    # Span [117, 262): 65 characters of Steps [107, 182) (shorter: the passage, 75 → 65 >= 37.5)
    # and 65 of Cfg value [197, 286) (shorter: the passage, 89 → 65 >= 44.5).
    text = (
        "The steps setting defaults to 20. More steps rarely help past 30.\n\n## Guidance\n\n"
        "### Cfg value\n\nThe cfg value defaults to 8.0 and sets how closely"
    )
    assert mapped(mapper, text) == ([STEPS, CFG], "text 1.00")
    # Cut after "8.0": 44 characters of Cfg value, below half of its 89 — the segment only touches it.
    assert mapped(mapper, text.split(" and sets")[0]) == ([STEPS], "text 1.00")


def test_what_platforms_change_does_not_matter(mapper):
    # Whitespace collapsed, heading marks dropped, full-width punctuation and digits.
    assert mapped(
        mapper, "Cfg value The cfg value defaults to ８．０，and sets how closely the prompt is followed。"
    ) == (
        [CFG],
        "text 1.00",
    )
    # Markdown bullets and emphasis added.
    assert mapped(mapper, "- **A negative prompt** lists what to avoid,\n- such as blur or watermarks.") == (
        [NEGATIVE],
        "text 1.00",
    )


def test_text_the_platform_added_lowers_the_share_it_reports(mapper):
    # "fromthehandbook" (15) is nowhere in the corpus; "thestepssettingdefaultsto20" (27) is: 27/42.
    assert mapped(mapper, "From the handbook: The steps setting defaults to 20.") == ([STEPS], "text 0.64")


def test_text_mostly_absent_from_the_corpus_is_unmapped(mapper):
    # Only "sthestepssetting" (16 of 38 normalised characters) is found: 0.42 < min_overlap 0.5.
    assert mapped(mapper, "Bananas grow in warm places; the steps setting") == ([], "unmapped")
    assert mapped(mapper, "") == ([], "unmapped")


def test_a_few_characters_found_in_several_places_name_no_passage(mapper):
    # "steps" occurs three times in the corpus: it was mapped to every passage from the first
    # occurrence to the last, and a 4-character heading word to 7 documents, inflating recall.
    assert mapped(mapper, "Steps") == ([], "unmapped")
    assert mapped(mapper, "8.0") == ([CFG], "text 1.00")  # once in the corpus: that passage


def test_a_context_named_by_its_corpus_passage_id_maps_to_it_whatever_its_text(mapper):
    """An agent written over ragtrack's own corpus returns passage IDs; it was mapped by text only."""
    assert mapped(mapper, "", score=0.5) == ([], "unmapped")
    ctx = mapper.map(PlatformContext(CFG, ""))
    assert (ctx.passage_ids, ctx.mapping) == ((CFG,), "passage_id")
    assert mapper.map(PlatformContext("guides/sampler.md#no-such-section", "")).mapping == "unmapped"


def test_the_same_words_elsewhere_in_the_document_do_not_stretch_the_span(mapper):
    # "defaults to" also occurs in the Steps section just before: it must not pull Steps in.
    text = "### Cfg value\nThe cfg value defaults to 8.0 and sets how closely the prompt is followed.\n"
    text += "### Negative prompt\nA negative prompt lists what to avoid, such as blur or watermarks."
    assert mapped(mapper, text) == ([CFG, NEGATIVE], "text 1.00")


def test_the_id_table_wins_unless_its_text_says_otherwise_and_unknown_passages_fall_back_to_text(tiny_corpus, tmp_path):
    path = tmp_path / "kb.ids.json"
    path.write_text(json.dumps({"format": 1, "segments": {"s1": [STEPS], "s2": ["gone.md#1"], "s3": [CFG]}}))
    table = IdTable.load(path, tiny_corpus)
    assert table.segments == {"s1": (STEPS,), "s2": (), "s3": (CFG,)}
    mapper = ContextMapper(tiny_corpus, 0.5, table)
    # s1 is in the table: a text found nowhere (a platform's formatting, say) does not overrule it.
    assert mapper.map(PlatformContext("s1", "text of words the corpus does not have")).passage_ids == (STEPS,)
    assert mapper.map(PlatformContext("s1", "text of words the corpus does not have")).mapping == "id_table"
    # Dify keeps a segment's ID when its text is edited: text now found in another passage was still
    # credited to the old one (recall unchanged, nothing unmapped, no warning).
    moved = mapper.map(PlatformContext("s1", "The cfg value defaults to 8.0 and sets how closely the prompt"))
    assert (moved.passage_ids, moved.mapping) == ((CFG,), "text 1.00 (id table stale)")
    # A citation merged with its neighbour's covers both (it was mapped to the first only).
    merged = "### Cfg value\nThe cfg value defaults to 8.0 and sets how closely the prompt is followed.\n"
    merged += "### Negative prompt\nA negative prompt lists what to avoid, such as blur or watermarks."
    both = mapper.map(PlatformContext("s3", merged))
    assert (both.passage_ids, both.mapping) == ((CFG, NEGATIVE), "id_table+text")
    # s2 names a passage this corpus does not have: mapped by its text instead.
    assert mapper.map(PlatformContext("s2", "The cfg value defaults to 8.0")).mapping == "text 1.00"


def test_id_table_location_and_errors(tmp_path, tiny_corpus):
    assert id_table_path("golden/dify-kb.jsonl").as_posix() == "golden/dify-kb.ids.json"
    assert IdTable.load(tmp_path / "missing.ids.json", tiny_corpus) is None
    bad = tmp_path / "bad.ids.json"
    bad.write_text('{"segments": ["not", "a", "table"]}')
    with pytest.raises(InputError, match="bad.ids.json: segments: expected an object"):
        IdTable.load(bad, tiny_corpus)


def test_chinese_with_full_width_punctuation_and_list_marks(tmp_path):
    corpus_file = tmp_path / "zh.jsonl"
    rows = [
        {
            "id": "wifi#1",
            "doc_id": "wifi.md",
            "text": "## 连接Wi-Fi\n\n1. 长按配对键5秒，指示灯快闪。\n2. 在App中选择“添加设备”。",
        },
        {"id": "wifi#2", "doc_id": "wifi.md", "text": "## 重置\n\n按住复位键10秒，设备恢复出厂设置。"},
    ]
    corpus_file.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    mapper = ContextMapper(load_corpus(corpus_file), 0.5)
    assert mapped(mapper, '长按配对键5秒, 指示灯快闪. 在App中选择"添加设备".') == (["wifi#1"], "text 1.00")
    assert mapped(mapper, "按住复位键 10 秒,设备恢复出厂设置") == (["wifi#2"], "text 1.00")


def test_a_document_hint_settles_text_found_in_two_documents(tmp_path):
    corpus_file = tmp_path / "dup.jsonl"
    same = "Restart the hub after every firmware update to apply it."
    rows = [
        {"id": "a#1", "doc_id": "a.md", "text": same},
        {"id": "b#1", "doc_id": "b.md", "text": same},
        {"id": "b#2", "doc_id": "b.md", "text": "Something else entirely, about cables."},
    ]
    corpus_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    mapper = ContextMapper(load_corpus(corpus_file), 0.5)
    assert mapped(mapper, same) == (["a#1", "b#1"], "text 1.00")  # it covers both
    assert mapped(mapper, same, doc_name="b.md") == (["b#1"], "text 1.00")
    assert mapped(mapper, same, doc_name="docs/kb/a.md") == (["a#1"], "text 1.00")  # a path ending in the ID


def test_an_unmapped_context_takes_a_rank_and_counts_as_retrieved():
    out = AgentOutput(
        "answer",
        [RetrievedContext("u1", "junk", (), mapping="unmapped"), RetrievedContext("u2", "gt text", ("g",))],
    )
    assert out.passage_ids == ["unmapped:u1", "g"]
    scores = retrieval_scores(passage_groups(out.contexts), ["g"], k=2)
    assert scores.pop("all_hops_at_k") is None  # no GT groups on this item
    # recall 1/1; precision 1/2 (the unmapped context is in the denominator); first GT at rank 2;
    # nDCG@2 = (1/log2(3)) / (1/log2(2)) = 0.6309; precision@2 = 1 relevant unit of 2.
    assert scores == pytest.approx(
        {
            "context_recall": 1.0,
            "context_precision": 0.5,
            "precision_at_k": 0.5,
            "reciprocal_rank": 0.5,
            "hit_rate": 1.0,
            "ndcg_at_k": 0.63093,
        },
        abs=1e-5,
    )


def test_a_context_is_not_credited_with_the_passages_between_its_matched_runs(mapper):
    """A chunk holding the guide's intro and the Cfg value passage (the platform left out what lies
    between, as a RAGFlow chunk headed by its document's title does) was mapped from its first matched
    run to its last: Steps, which it does not hold, was credited too."""
    text = (
        "Sampler guide\nThe sampler node turns noise into a picture step by step. Guidance\nCfg value\n"
        "The cfg value defaults to 8.0 and sets how closely the prompt is followed."
    )
    assert mapped(mapper, text) == ([GUIDE, CFG], "text 1.00")
