"""What the MLflow pages say, as pure functions: metric names and their order, records with stages, descriptions.

The figures below are hand-computed; the store-backed story (traces, descriptions written where the UI shows
them) is in test_mlflow_story.py and the browser test.
"""

from __future__ import annotations

import pytest

from ragtrack.evaluation import metrics as m
from ragtrack.evaluation.compare import ItemChange, MetricRow
from ragtrack.evaluation.promotion import Champion, Rule, Standing, decide
from ragtrack.evaluation.stats import PairedDifference
from ragtrack.llm.accounting import Usage
from ragtrack.records import ContextRecord, ItemRecord, JudgeRecord, RunSummary, StageRecord, substitutions
from ragtrack.registry import UnknownNameError
from ragtrack.tracking import descriptions as d
from ragtrack.tracking.traces import retrieval_rationale

LINKS = d.Links("rag-agent")


def summary(version: str, model_version: str, metrics: dict[str, float], **kw) -> RunSummary:
    return RunSummary(f"run-{version}", version, "digest1", "heuristic@h2", "0.5", False, model_version, metrics, **kw)


# ------------------------------------------------------------------ metric names
def test_runs_log_the_primary_means_first_then_per_type_then_prefixed_secondary_figures():
    logged = [
        "usage/judge/total/calls",
        "counts/items/type_A",
        "correctness/type_A",
        "counts/judge_errors/correctness",
        "counts/items",
        "counts/judged/correctness",
        "norm/groundedness",
        "norm/correctness",
        "delta/mrr",
        "delta_p/correctness",
        "delta/correctness",
        "organization",
        "mrr",
        "context_recall",
        "groundedness",
        "correctness",
        "usage/peak_in_flight",
        "mrr/type_A",
        "groundedness/type_B",
        "correctness/type_B",
        "mapping/unmapped_share",
    ]
    assert m.display_order(logged) == [
        "correctness",
        "groundedness",
        "context_recall",
        "mrr",
        "organization",
        "correctness/type_A",
        "correctness/type_B",
        "groundedness/type_B",
        "mrr/type_A",
        "delta/correctness",
        "delta_p/correctness",
        "delta/mrr",
        "norm/correctness",
        "norm/groundedness",
        "counts/items",
        "counts/items/type_A",
        "counts/judge_errors/correctness",
        "counts/judged/correctness",
        "mapping/unmapped_share",
        "usage/judge/total/calls",
        "usage/peak_in_flight",
    ]
    # Every secondary figure sits under a prefix; the primary ones are the comparable means.
    primary = [k for k in logged if "/" not in m.split_key(k)[0]]
    assert {m.split_key(k)[0] for k in primary} <= set(m.comparable_metrics())


def test_keys_logged_before_the_prefixes_read_back_under_todays_names():
    old = {
        "correctness_norm": "norm/correctness",
        "relevance_n/type_B": "counts/judged/relevance/type_B",
        "judge_errors/groundedness": "counts/judge_errors/groundedness",
        "items": "counts/items",
        "items/type_D": "counts/items/type_D",
        "retrieval_n": "counts/retrieval_reported",
        "unmapped_share/type_A": "mapping/unmapped_share/type_A",
        "agent_errors": "counts/agent_errors",
        "unanswered": "counts/unanswered",
    }
    assert {k: m.current_key(k) for k in old} == old
    for today in (
        "correctness",
        "ndcg_at_k/type_C",
        "hit_rate",
        "norm/correctness",
        "delta/mrr",
        "usage/peak_in_flight",
    ):
        assert m.current_key(today) == today
    # A gate written with the old name still names the metric.
    assert m.lookup("groundedness_norm").name == "norm/groundedness" == m.lookup("norm/groundedness").name


def test_comparison_usage_and_display_names_come_from_the_registry():
    assert m.comparison_key("delta_ci_low", "correctness") == "delta_ci_low/correctness"
    assert m.comparison_key("delta", "mrr", "B") == "delta/mrr/type_B"
    with pytest.raises(UnknownNameError, match="unknown comparison figure 'ci'"):
        m.comparison_key("ci", "mrr")
    assert m.usage_key("judge", "judge.correctness", "calls") == "usage/judge/judge.correctness/calls"
    assert m.display_order([m.PEAK_IN_FLIGHT, "counts/items", "norm/relevance"])[-1] == m.PEAK_IN_FLIGHT
    # Logged to be read: three decimals; three significant digits below 0.001 (not 0).
    assert m.for_display(2.5208333333) == 2.521 and m.for_display(0.123456789) == 0.123
    assert m.for_display(0.0000123456) == 0.0000123 and m.for_display(2604.1666) == 2604.167
    assert m.for_display(0.0) == 0.0 and m.for_display(-0.0625) == -0.062  # half to even, as Python rounds


# ------------------------------------------------------------------ records
def record(**kw) -> ItemRecord:
    base = dict(
        id="a1",
        type="A",
        question="What is the default cfg value?",
        gt_context_ids=["p1", "p2"],
        gt_answer="8.0",
        answer="It is 8.0.",
        contexts=[ContextRecord("u1", "text one", ["p3", "p1"], 0.9), ContextRecord("u2", "text two", ["p4"], 0.5)],
        retrieval={"context_recall": 0.5},
        judges={"correctness": JudgeRecord(4, 0.75, "the value agrees")},
        usage={"agent": {"answer": Usage(offline=1)}},
    )
    return ItemRecord(**{**base, **kw})


def test_item_records_keep_their_stages_and_read_records_without_them():
    stage = StageRecord("retrieve", "retriever", 10, 25, {"k": 2}, {}, [ContextRecord("u1", "t", ["p1"])])
    r = record(stages=[stage])
    back = ItemRecord.from_json(r.to_json())
    assert back == r and back.stages[0].contexts[0].passage_ids == ["p1"]

    data = record().to_json()
    del data["stages"]  # written before stages were kept
    data["from_a_newer_ragtrack"] = {"x": 1}  # and a key this ragtrack does not know
    data["contexts"][0]["future"] = True
    assert ItemRecord.from_json(data).stages == [] and ItemRecord.from_json(data).contexts[0].unit_id == "u1"


def test_retrieval_rationale_names_found_and_missed_gt_passages():
    assert retrieval_rationale(record()) == "1 of 2 GT passages retrieved: p1 (context 1); missed: p2"


# ------------------------------------------------------------------ descriptions
def test_tables_are_markdown_with_spaced_cells():
    text = d.table(["metric", "all"], [["mrr", "0.500"]])
    gap = "\u00a0" * 3
    assert text.splitlines() == [f"| metric | {gap}all |", "|:--|--:|", f"| mrr | {gap}0.500 |"]


def test_scores_table_has_every_metric_overall_and_per_type_with_counts():
    metrics = {
        "correctness": 2.5,
        "correctness/type_A": 3.0,
        "counts/judged/correctness": 3.0,
        "counts/judged/correctness/type_A": 2.0,
        "mrr": 0.5,
        "mrr/type_A": 0.75,
        "context_recall": 0.5,
        "counts/items": 4.0,
        "counts/items/type_A": 2.0,
    }
    rows = {line.split(" | ")[0].strip("| "): line for line in d.scores(metrics).splitlines()}
    gap = "\u00a0" * 3
    assert rows["metric"] == f"| metric | {gap}all (4) | {gap}type A (2) |"
    assert rows["correctness (1–5)"] == f"| correctness (1–5) | {gap}**2.50 (n=3)** | {gap}3.00 |"
    assert rows["mrr"] == f"| mrr | {gap}0.500 | {gap}0.750 |"
    assert rows["context_recall"] == f"| context_recall | {gap}0.500 | {gap}— |"  # no per-type value: a dash
    assert "relevance (1–5)" not in rows  # a metric with no value in any scope is left out
    # Retrieval means over fewer items (replies that did not say what they retrieved) say so as judges do.
    rows = {
        line.split(" | ")[0].strip("| "): line
        for line in d.scores({**metrics, "counts/retrieval_reported": 3.0}).splitlines()
    }
    assert rows["mrr"] == f"| mrr | {gap}0.500 (n=3) | {gap}0.750 |"


def test_an_eval_run_with_failed_items_says_how_many_were_judged_and_lists_the_errors():
    """The Markdown of a run with 13 of 48 items failed read "over 48 items" and listed no error."""
    metrics = {
        "correctness": 1.5,
        "counts/judged/correctness": 35.0,
        "groundedness": 4.0,
        "counts/items": 48.0,
        "counts/unanswered": 13.0,
    }
    errors = ["7 items (a1, a2, a3, a4, …): python: the answer (answer) is not text"]
    text = d.eval_run(summary("flaky", "2", metrics), {"golden_items": "48"}, "", 48, None, LINKS, errors)
    assert text.splitlines()[0].endswith("over 48 items (35 judged)  ")
    section = text.split("**Errors** (the figures above leave these items out where they say n)\n\n")[1]
    assert section.splitlines()[0] == f"* {errors[0]}"
    assert "**Errors**" not in d.eval_run(
        summary("ok", "2", {"counts/items": 2.0}), {"golden_items": "2"}, "", 2, None, LINKS
    )


def diff(mean_a, mean_b, low, high, p, n=4):
    """A paired difference with its interval; an interval of width 0 is one whose differences did not vary."""
    return PairedDifference(n, mean_a, mean_b, mean_b - mean_a, low, high, p, se=(high - low) / 3.92)


def test_paired_table_shows_difference_interval_and_p_with_per_type_rows_for_the_criterion():
    rows = [
        MetricRow("correctness", "all", diff(2.0, 2.5, 0.25, 0.75, 0.125), 4),
        MetricRow("correctness", "A", diff(2.0, 3.0, 1.0, 1.0, 0.5, n=2), 2),
        MetricRow("mrr", "all", diff(0.5, 0.5, -0.25, 0.25, 1.0, n=3), 4),
        MetricRow("mrr", "A", diff(0.5, 0.5, 0.0, 0.0, 1.0, n=2), 2),  # per type: only criterion and recall
    ]
    lines = d.paired("v1", "v5", rows).splitlines()
    gap = "\u00a0" * 3
    cells = [[c.strip("\u00a0 ") for c in line.strip("|").split("|")] for line in lines]
    assert cells[0] == ["metric", "v1", "v5", "Δ v5 − v1", "95% CI", "p", "items"]
    assert cells[2] == ["correctness (1–5)", "2.00", "2.50", "**+0.500**", "[+0.250, +0.750]", "0.125", "4"]
    # Both type-A items moved by exactly +1: no interval, never a zero-width one (issue 49).
    assert cells[3] == ["↳ type A", "2.00", "3.00", "+1.000", "no variation in 2 items — not evidence", "0.500", "2"]
    assert cells[4] == ["mrr", "0.500", "0.500", "+0.000", "[-0.250, +0.250]", "1.000", "3 of 4"]
    assert len(lines) == 5 and gap in lines[2]


def test_a_comparison_of_runs_on_different_inputs_names_each_sides():
    """With --allow-incomparable the heading named B's golden set and judge only, as if both had them."""
    from dataclasses import replace

    a, b = summary("v1", "1", {}), summary("v6", "2", {})
    assert d.comparison(a, b, [], []).startswith("**v1 → v6** (golden digest1, judge heuristic@h2): ")
    b = replace(b, golden_digest="digest8", judge_identity="openai:judge-m")
    assert d.comparison(a, b, [], []).startswith(
        "**v1 → v6** (NOT COMPARABLE: v1 on golden digest1, judge heuristic@h2; "
        "v6 on golden digest8, judge openai:judge-m): "
    )


def test_substitutions_list_each_model_used_instead_of_the_one_requested():
    params = {"rerank_model_requested": "BAAI/bge-reranker-base", "rerank_model": "none", "embedding_model": "x"}
    params["embedding_model_requested"] = "x"
    assert substitutions(params) == "rerank_model `BAAI/bge-reranker-base` → `none`"


def standing(challenger: RunSummary, champion: RunSummary, rows: list[MetricRow]) -> Standing:
    paired = {r.metric: r.diff for r in rows if r.scope == "all"}
    decision = decide(challenger, Champion(champion.model_version, champion.version, champion), Rule(), paired)
    changes = (ItemChange("a2", "A", "q", "correctness", 2.0, 4.0), ItemChange("a1", "A", "q", "mrr", 1.0, 0.5))
    return Standing(decision, champion, tuple(rows), changes)


def test_outside_the_ui_links_point_at_the_tracking_server():
    from ragtrack.tracking.descriptions import outside_ui

    text = "run [1a2b](#/runs/1a2b) of [v3](#/models/rag-agent/versions/3); see (#/ not a link)"
    assert outside_ui(text, "http://mlflow.team:5000/") == (
        "run [1a2b](http://mlflow.team:5000/#/runs/1a2b) of "
        "[v3](http://mlflow.team:5000/#/models/rag-agent/versions/3); see (#/ not a link)"
    )
    assert outside_ui(text, None) == text


def test_an_eval_run_description_starts_with_its_verdict_against_the_champion():
    base = {
        "correctness": 2.0,
        "groundedness": 5.0,
        "counts/judged/correctness": 4.0,
        "counts/judged/groundedness": 4.0,
        "counts/items": 4.0,
    }
    v1 = summary("v1", "1", base)
    v5 = summary("v5", "2", {**base, "correctness": 2.5, "context_recall": 0.75, "mrr": 0.5})
    rows = [
        MetricRow("correctness", "all", diff(2.0, 2.5, 0.25, 0.75, 0.125), 4),
        MetricRow("groundedness", "all", diff(5.0, 5.0, 0.0, 0.0, 1.0), 4),
    ]
    params = {"golden_items": "4", "spec.version.description": "recall fixes"}
    text = d.eval_run(v5, params, "- low MRR (0.50): ranking.", 4, standing(v5, v1, rows), LINKS)
    first, second = text.splitlines()[:2]
    assert first == (
        "**v5**: correctness (1–5) 2.50, groundedness (1–5) 5.00, context_recall 0.750, mrr 0.500 over 4 items  "
    )
    assert second.startswith("Against champion **v1**: correctness Δ **+0.500** (95% CI [+0.250, +0.750], p 0.125)")
    assert "`ragtrack promote v5` would promote it: correctness 2.500 vs 2.000" in second
    assert "recall fixes · 4 golden items (digest `digest1`) · judge `heuristic@h2`" in text
    assert "model version [2](#/models/rag-agent/versions/2)" in text
    assert "Champion's eval [run-v1](#/runs/run-v1)" in text
    assert "Items whose correctness moved most: a2 (2 → 4)." in text
    assert "- low MRR (0.50): ranking." in text and "Substituted" not in text
    # A branch that keeps the champion's name: "Against champion **v1**" on v1's own page said nothing.
    branch = summary("v1", "3", {**base, "correctness": 2.5})
    text = d.eval_run(branch, params, "", 4, standing(branch, v1, rows), LINKS)
    assert text.splitlines()[1].startswith("Against champion **v1** (model version 1): correctness Δ **+0.500**")


def test_an_incomplete_run_says_so_instead_of_a_verdict():
    run = summary("v5", "2", {"counts/items": 2.0})
    text = d.eval_run(run, {"golden_items": "5"}, "", 2, None, LINKS)
    assert text.splitlines()[1] == (
        "**Incomplete**: 2 of 5 items; run the same `ragtrack eval` again to resume this run."
    )


def test_an_eval_run_lists_its_cautions_before_its_scores_and_none_when_it_has_none():
    cautions = ("--limit 2 takes the first 2 items in file order: no item of type B", "an English embedder…")
    text = d.eval_run(
        summary("v5", "2", {"counts/items": 2.0}, cautions=cautions), {"golden_items": "2"}, "", 2, None, LINKS
    )
    section = text.split("**Cautions** (the figures depend on them)\n\n")[1].split("\n\n")[0]
    assert section.splitlines() == [f"* {c}" for c in cautions] and text.index(section) < text.index("**Scores**")
    assert "Cautions" not in d.eval_run(
        summary("v5", "2", {"counts/items": 2.0}), {"golden_items": "2"}, "", 2, None, LINKS
    )


def test_a_decision_in_full_has_figures_interval_rule_gates_and_runs():
    v1 = summary("v1", "1", {"correctness": 2.0, "groundedness": 5.0, "counts/items": 4.0})
    v5 = summary("v5", "2", {"correctness": 1.5, "groundedness": 5.0, "counts/items": 4.0})
    rows = [
        MetricRow("correctness", "all", diff(2.0, 1.5, -1.0, 0.0, 0.5), 4),
        MetricRow("groundedness", "all", diff(5.0, 5.0, 0.0, 0.0, 1.0), 4),
    ]
    decision = standing(v5, v1, rows).decision
    decision.decision_run_id = "dec123456789"
    text = d.decision(decision, 0, LINKS)
    assert text.splitlines()[0] == "**v5 refused** over v1 (model version 1) on 1970-01-01 00:00 UTC"
    assert "- correctness 1.500 vs 2.000: Δ -0.500, 95% CI [-1.000, +0.000], p 0.500 over 4 paired items" in text
    assert "- rule: correctness > champion + 0 and groundedness >= champion - 0" in text
    assert "- gates: none" in text and "- refused because: correctness 1.500 vs champion 2.000" in text
    assert "decision run [dec12345](#/runs/dec123456789) · eval run [run-v5](#/runs/run-v5)" in text


def test_model_version_descriptions_start_with_a_plain_line_saying_whether_it_is_champion():
    history = [d.PastDecision("r1", 0, "v5 refused over v1 (model version 1): …")]
    champ = d.model_version("v1", "1", ("1", "v1"), 60_000, "", history, LINKS)
    assert champ.splitlines()[0] == "v1 is the champion since 1970-01-01 00:01 UTC"
    assert "- 1970-01-01 00:00 UTC: v5 refused over v1 (model version 1): … ([run](#/runs/r1))" in champ
    other = d.model_version("v5", "2", ("1", "v1"), None, "**v5 refused** …", [], LINKS)
    assert other.splitlines()[0] == "v5 is not the champion: v1 (model version 1) is"
    assert d.model_version("v5", "2", None, None, "", [], LINKS).startswith("v5 is not the champion (there is none")


def test_the_experiment_description_is_a_leaderboard_headed_by_the_champion():
    v1 = summary("v1", "1", {"correctness": 2.0, "groundedness": 5.0, "context_recall": 0.5, "mrr": 0.25})
    v5 = summary(
        "v5",
        "2",
        {
            "correctness": 2.5,
            "groundedness": 5.0,
            "context_recall": 0.75,
            "mrr": 0.5,
            "delta/correctness": 0.5,
            "delta_ci_low/correctness": 0.25,
            "delta_ci_high/correctness": 0.75,
        },
        compared_to="1",
    )
    text = d.experiment(("1", "v1"), 0, [v1, v5], "#/view", LINKS)
    lines = text.splitlines()
    assert lines[0].startswith("Champion: **v1** since 1970-01-01 00:00 UTC ([model version 1](")
    assert "[all versions side by side](#/view)" in lines[0]
    gap = "\u00a0" * 3
    assert lines[5] == (
        f"| **v5** | {gap}[2](#/models/rag-agent/versions/2) | {gap}2.50 | {gap}5.00 | {gap}0.750 | {gap}0.500 | "
        f"{gap}+0.500 [+0.250, +0.750] | {gap}[run-v5](#/runs/run-v5) |"
    )
    assert lines[4].startswith("| **v1** ★ |") and f"{gap}— |" in lines[4]
