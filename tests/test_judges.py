"""Judge verdict parsing (untrusted text) and the heuristic fallback judges."""

import pytest

from ragtrack.evaluation import heuristics
from ragtrack.evaluation.judges import JudgeInput, JudgeStep, judge_steps, parse_verdict
from ragtrack.llm.base import ParseError

GOOD = '{"score": 4, "reason": "close"}'


@pytest.mark.parametrize(
    "reply, score",
    [
        (GOOD, 4),
        ("```json\n" + GOOD + "\n```", 4),  # code fence
        ("Sure! Here is my verdict:\n" + GOOD + "\nHope it helps.", 4),  # prose around it
        ('｛"score"：5，"reason"："全部有依据"｝', 5),  # full-width punctuation
        ('{"score": "3", "reason": "string score"}', 3),
        ('{"score": "2/5", "reason": "fraction"}', 2),
        ('{"score": 5.0, "reason": "integral float"}', 5),
        ('{"score": 4, "reason": "cut off in the mid', 4),  # truncated, score readable
        ('score: 3\nreason: "loose format"', 3),
        # A reasoning model without a reasoning parser: its drafts inside <think> are not the verdict.
        (
            '<think>\nMaybe {"score": 1, "reason": "draft"}; no, score: 2…\n</think>\n{"score": 5, "reason": "ok"}',
            5,
        ),
        ("<THINK>score: 1?</THINK>\nscore: 4\nreason: fine", 4),
    ],
)
def test_parse_verdict_accepts_messy_but_readable_replies(reply, score):
    assert parse_verdict(reply).score == score


@pytest.mark.parametrize(
    "reply",
    [
        "",
        "I think it is good.",
        '{"score": 7, "reason": "x"}',
        '{"score": 0}',
        '{"score": 3.5}',
        '{"score": "high"}',
        '{"reason": "no score"}',
        "<think>\nThe answer matches; the score: 2 would apply, but first let me check",  # cut off thinking
        '<think>{"score": 4, "reason": "draft"}</think>',  # nothing after the reasoning
    ],
)
def test_parse_verdict_rejects_unreadable_or_out_of_range(reply):
    with pytest.raises(ParseError):
        parse_verdict(reply)


def test_a_reply_cut_off_while_reasoning_says_so_and_what_to_raise():
    """It was read as "score: 2" from the middle of the model's reasoning: 2.00 on every judge, 0 errors."""
    with pytest.raises(ParseError, match=r"stopped inside its <think> reasoning.*judge_max_tokens"):
        parse_verdict("<think>\nThe answer matches; the score: 2 would apply, but first")


def test_verdict_normalisation():
    assert parse_verdict('{"score": 1, "reason": ""}').normalized == 0.0
    assert parse_verdict('{"score": 5, "reason": ""}').normalized == 1.0
    assert parse_verdict('{"score": 3, "reason": ""}').normalized == 0.5


def test_every_judge_has_en_and_zh_prompts_with_their_placeholders():
    needs = {
        "correctness": {"{{question}}", "{{gt_answer}}", "{{answer}}"},
        "groundedness": {"{{contexts}}", "{{answer}}"},
        "relevance": {"{{question}}", "{{answer}}"},
        "organization": {"{{question}}", "{{contexts}}", "{{answer}}"},
    }
    for lang in ("en", "zh"):
        for name, step in judge_steps(lang).items():
            assert "<<<user>>>" in step.prompt
            user = step.prompt.split("<<<user>>>", 1)[1]
            for placeholder in needs[name]:
                assert placeholder in user, (lang, name, placeholder)
            # Relevance must not see contexts or the reference (variable isolation).
            if name == "relevance":
                assert "{{contexts}}" not in step.prompt and "{{gt_answer}}" not in step.prompt


def test_judge_messages_fill_every_placeholder():
    step = judge_steps("en")["groundedness"]
    msgs = step.messages(JudgeInput("q?", "the answer", "gt", ("ctx one", "ctx two")))
    text = " ".join(m["content"] for m in msgs)
    assert "{{" not in text and "[1] ctx one" in text and "the answer" in text


# ---------------------------------------------------------------- heuristics, hand-checked


def test_heuristic_correctness_counts_key_facts():
    gt = "The default `cfg` is `8.0` and the sampler is `euler`."
    assert heuristics.correctness("cfg defaults to 8.0 with the euler sampler.", gt)[0] == 5
    score, reason = heuristics.correctness("cfg defaults to 7.0 with dpmpp_2m.", gt)
    assert score <= 2 and "missing" in reason
    assert heuristics.correctness("", gt) == (1, "empty answer")


def test_heuristic_groundedness_flags_unsupported_numbers():
    ctx = ("Set the tile size in the VAE Decode (Tiled) node to lower memory use.",)
    assert heuristics.groundedness("Set the tile size in the VAE Decode (Tiled) node to lower memory use.", ctx)[0] == 5
    score, reason = heuristics.groundedness(
        "Set the tile size in the VAE Decode (Tiled) node. Use a tile size of 384 with overlap 32.", ctx
    )
    # Sentence 1: every unit in the context → 1.0. Sentence 2: units tile, size, 384, overlap, 32;
    # 2/5 found and its numbers are missing → min(0.4, 0.5) = 0.4. Mean 0.7 → band 4 (≥ 0.6).
    assert score == 4 and "1/2 statements unsupported" in reason and "384" in reason
    assert heuristics.groundedness("Use a tile size of 384 with overlap 32.", ctx)[0] == 3  # 0.4 → band 3


def test_heuristic_groundedness_reads_chinese_paraphrase_by_character_bigrams():
    ctx = ("显存不足时，把 VAE 解码换成分块解码节点即可降低占用。",)
    # Bigrams of "显存不足就用分块解码" (9): 显存 存不 不足 足就 就用 用分 分块 块解 解码;
    # all but 足就 就用 用分 occur in the context → 6/9 = 0.67 → band 4.
    assert heuristics.groundedness("显存不足就用分块解码。", ctx)[0] == 4
    assert heuristics.groundedness("把采样步数调到一百步。", ctx)[0] == 1


def test_heuristic_relevance_catches_parroting():
    q = "How do I install ComfyUI-Manager?"
    assert heuristics.relevance(q, "How do I install ComfyUI-Manager?")[0] == 1
    assert heuristics.relevance(q, "Clone ComfyUI-Manager into custom_nodes and restart to install it.")[0] == 5


def test_heuristic_organization_penalises_stitching_and_copying():
    ctx = ("The VAE decodes latents into pixels.", "Load VAE picks a separate file.")
    assert heuristics.organization("According to context 1, the VAE decodes latents.", ctx)[0] == 3
    assert heuristics.organization("The VAE decodes latents into pixels.", ctx)[0] == 1
    assert (
        heuristics.organization("A VAE turns latents back into an image; a separate one is chosen with Load VAE.", ctx)[
            0
        ]
        == 5
    )


def test_judge_step_offline_uses_the_heuristic():
    step = JudgeStep("judge.relevance", "", judge="relevance")
    verdict = step.offline(JudgeInput("How do I install it?", "How do I install it?", "", ()))
    assert verdict.score == 1


def test_chinese_correctness_matches_characters_not_jieba_words():
    # jieba keeps "林龙松" as one word; the reference's "龙松" is still in the answer's text.
    gt = "作者是龙松。"
    score, reason = heuristics.correctness("这本书的作者是林龙松。", gt, "zh")
    assert score == 5 and reason.startswith("参考答案的")
    # The other way round, a name the answer lacks is missing: "林龙松" is not in "龙松".
    assert heuristics.correctness("作者是龙松。", "作者是林龙松。", "zh")[0] < 5


def test_heuristic_reasons_follow_the_judge_language():
    from ragtrack.evaluation.judges import JudgeInput, judge_steps

    inp = JudgeInput(
        "网关最多接多少个设备？", "网关最多接 64 个子设备。", "最多 64 个子设备。", ("网关最多接 64 个子设备。",)
    )
    for language, marker in (("zh", "实词"), ("en", "content words")):
        steps = judge_steps(language)
        assert marker in steps["correctness"].offline(inp).reason
        assert all(steps[j].offline(inp).reason for j in steps)
    assert heuristics.relevance("网关最多接多少个设备？", "网关最多接多少个设备？", "zh") == (1, "回答只是重复了问题")
