"""Paired statistics, comparison and the promotion gate on a real MLflow store and registry.

Eval runs here are logged with hand-chosen per-item scores (through the same
logging functions ``evaluate`` uses), so every decision can be checked by hand.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ragtrack.api import evaluate, retire, retirement_candidates
from ragtrack.config import load_config
from ragtrack.corpus import load_corpus
from ragtrack.evaluation.aggregate import aggregate
from ragtrack.evaluation.compare import compare_records
from ragtrack.evaluation.runner import ItemRecord, JudgeRecord
from ragtrack.evaluation.stats import compare_paired, paired_bootstrap_ci, paired_permutation_p
from ragtrack.golden import load_golden
from ragtrack.tracking import runs
from ragtrack.tracking.compare import latest_eval_run, load_records
from ragtrack.tracking.promotion import ALIAS, Rule, current_champion, decide
from ragtrack.tracking.store import open_store

# ---------------------------------------------------------------- statistics, by hand


def test_permutation_p_is_exact_for_small_n():
    # d = (1, 1, 1): of the 8 sign patterns only +++ and --- reach |mean| >= 1.
    assert paired_permutation_p([1, 1, 1]) == pytest.approx(2 / 8)
    # d = (2, -1): |mean| 0.5; patterns: (+2,-1)=.5 (-2,+1)=.5 (+2,+1)=1.5 (-2,-1)=1.5 -> all 4 >= .5
    assert paired_permutation_p([2, -1]) == 1.0
    assert paired_permutation_p([0, 0, 0]) == 1.0


def test_bootstrap_interval_brackets_the_mean_and_collapses_for_constant_differences():
    assert paired_bootstrap_ci([0.5] * 6) == (0.5, 0.5)
    low, high = paired_bootstrap_ci([1, 0, 0, 1, 1, 0, 1, 1])
    assert low < 0.625 < high and low >= 0 and high <= 1
    d = compare_paired([1, 2, 3], [2, 3, 5])
    assert d.delta == pytest.approx(4 / 3) and d.mean_a == 2 and d.mean_b == pytest.approx(10 / 3)


# ---------------------------------------------------------------- helpers


def record(item: str, kind: str, correctness: int | None, groundedness: int = 5, recall: float = 1.0) -> ItemRecord:
    def verdict(score):
        if score is None:
            return JudgeRecord(None, None, "", error="parse: no score", raw="???")
        return JudgeRecord(score, (score - 1) / 4, "hand-set")

    return ItemRecord(
        id=item,
        type=kind,
        question=f"question {item}",
        gt_context_ids=["p"],
        gt_answer="gt",
        answer="a",
        retrieved_unit_ids=[],
        retrieved_passage_ids=["p"] if recall else [],
        contexts=[],
        retrieval={
            "context_recall": recall,
            "context_precision": recall,
            "reciprocal_rank": recall,
            "hit_rate": recall,
            "ndcg_at_k": recall,
        },
        judges={"correctness": verdict(correctness), "groundedness": verdict(groundedness)},
    )


def log_eval(store, version, correctness, groundedness=None, *, digest="g1", judge="heuristic@h1", substituted=False):
    """Register ``version`` (once) and log a complete eval run with these per-item scores."""
    existing = store.client.search_model_versions(
        f"name='{store.registered_model}' and tags.`ragtrack.version`='{version}'"
    )
    if existing:
        model_version = str(existing[0].version)
    else:
        with contextlib.suppress(Exception):  # already registered
            store.client.create_registered_model(store.registered_model)
        source = Path(store.tracking_uri.removeprefix("sqlite:///")).parent / "hand-models" / version
        source.mkdir(parents=True, exist_ok=True)
        mv = store.client.create_model_version(
            store.registered_model, source=source.as_uri(), tags={"ragtrack.version": version}
        )
        model_version = str(mv.version)
    groundedness = groundedness or [5] * len(correctness)
    types = "ABCD"
    records = [
        record(f"i{n}", types[n % 4], c, g) for n, (c, g) in enumerate(zip(correctness, groundedness, strict=True))
    ]
    tags = runs.eval_tags(
        version=version,
        spec_hash="h",
        golden_digest=digest,
        judge_identity=judge,
        substituted=substituted,
        model_version=model_version,
        model_id="m",
    )
    run_id = runs.start_run(store, f"eval {version}", {"mapping_min_overlap": "0.5"}, tags)
    runs.log_metrics(store, run_id, aggregate(records, ("correctness", "groundedness")))
    runs.log_items(store, run_id, records)
    runs.finish_run(store, run_id, complete=True)
    time.sleep(0.01)  # "latest run" is by start time
    return run_id, model_version


@pytest.fixture
def store(tmp_path):
    return open_store(load_config(tmp_path))


def promote(store, tmp_path, version, **rule):
    return decide(store, version, Rule(**rule), dry_run=False, lock_dir=tmp_path)


BASE = [3, 3, 3, 3, 3, 3, 3, 3]


# ---------------------------------------------------------------- the rule


def test_first_version_becomes_champion_and_the_decision_is_recorded(store, tmp_path):
    run_id, mv = log_eval(store, "v1", BASE)
    d = promote(store, tmp_path, "v1")
    assert d.promoted and "no champion yet" in d.reasons[0]
    assert current_champion(store) == (mv, "v1")
    tags = store.client.get_model_version(store.registered_model, mv).tags
    assert tags["ragtrack.decision"].startswith("promoted") and tags["ragtrack.decision_run"] == d.decision_run_id
    decision_run = store.client.get_run(d.decision_run_id)
    assert (
        decision_run.data.tags["ragtrack.kind"] == "promotion" and decision_run.data.params["challenger_run"] == run_id
    )


def test_better_correctness_without_groundedness_regression_wins(store, tmp_path):
    log_eval(store, "v1", BASE)
    promote(store, tmp_path, "v1")
    _, mv2 = log_eval(store, "v2", [4, 4, 3, 4, 3, 4, 4, 4])
    d = promote(store, tmp_path, "v2")
    assert d.promoted, d.reasons
    assert d.figures["champion_correctness"] == 3 and d.figures["correctness_delta"] == pytest.approx(0.75)
    assert current_champion(store)[0] == mv2
    assert (
        store.client.get_model_version(store.registered_model, "1")
        .tags["ragtrack.last_challenge"]
        .startswith("v2 promoted")
    )


def test_equal_correctness_is_not_enough_and_margin_applies(store, tmp_path):
    log_eval(store, "v1", BASE)
    promote(store, tmp_path, "v1")
    log_eval(store, "v2", BASE)
    d = promote(store, tmp_path, "v2")
    assert not d.promoted and "does not beat the margin 0" in d.reasons[0]
    log_eval(store, "v3", [4, 3, 3, 3, 3, 3, 3, 3])  # +0.125
    assert not promote(store, tmp_path, "v3", margin=0.2).promoted
    assert promote(store, tmp_path, "v3", margin=0.1).promoted


def test_groundedness_regression_refuses_unless_within_tolerance(store, tmp_path):
    log_eval(store, "v1", BASE)
    promote(store, tmp_path, "v1")
    log_eval(store, "v2", [5] * 8, [5, 5, 5, 5, 5, 5, 4, 4])  # groundedness -0.25
    d = promote(store, tmp_path, "v2")
    assert not d.promoted and "groundedness regressed" in " ".join(d.reasons)
    assert promote(store, tmp_path, "v2", tolerance=0.25).promoted


def test_significance_can_be_required(store, tmp_path):
    log_eval(store, "v1", BASE)
    promote(store, tmp_path, "v1")
    log_eval(store, "v2", [5, 3, 3, 3, 3, 3, 3, 2])  # +0.125 from one item up, one down: noise
    d = promote(store, tmp_path, "v2", require_significance=True)
    assert not d.promoted and "not significant" in " ".join(d.reasons)
    assert promote(store, tmp_path, "v2").promoted


def test_runs_on_different_golden_sets_or_judges_are_not_compared(store, tmp_path):
    log_eval(store, "v1", BASE)
    promote(store, tmp_path, "v1")
    log_eval(store, "v2", [5] * 8, digest="other")
    d = promote(store, tmp_path, "v2")
    assert not d.promoted and "no eval on the same golden set" in d.reasons[0]
    log_eval(store, "v2", [5] * 8, judge="openai:gpt|prompts=abc|t=0.0")
    assert not promote(store, tmp_path, "v2").promoted


def test_substituted_models_and_partial_means_refuse_unless_allowed(store, tmp_path):
    log_eval(store, "v1", BASE)
    promote(store, tmp_path, "v1")
    log_eval(store, "v2", [5] * 8, substituted=True)
    d = promote(store, tmp_path, "v2")
    assert not d.promoted and "substituted" in d.reasons[0]
    assert promote(store, tmp_path, "v2", allow_substitutes=True).promoted

    log_eval(store, "v3", [5, 5, 5, 5, 5, 5, 5, None])  # one judge error: mean over 7 of 8
    d = promote(store, tmp_path, "v3")
    assert not d.promoted and "fewer than all items" in d.reasons[0]


def test_release_gates_are_reported_per_gate(store, tmp_path):
    log_eval(store, "v1", BASE)
    d = promote(store, tmp_path, "v1", gates={"context_recall": 0.9, "correctness_norm": 0.75})
    assert not d.promoted
    assert [(g.metric, g.passed) for g in d.gates] == [("context_recall", True), ("correctness_norm", False)]
    assert "gate correctness_norm >= 0.75 failed (0.5)" in d.reasons


def test_dry_run_decides_without_moving_the_alias(store, tmp_path):
    log_eval(store, "v1", BASE)
    d = decide(store, "v1", Rule(), dry_run=True, lock_dir=tmp_path)
    assert d.promoted and d.dry_run and current_champion(store) is None


def test_compare_records_pairs_items_and_flags_partial_judges():
    a = [record("i1", "A", 3), record("i2", "A", 2), record("i3", "B", 4)]
    b = [record("i1", "A", 5), record("i2", "A", None), record("i3", "B", 4, recall=0.0)]
    rows, changes = compare_records(a, b, ("correctness", "context_recall"))
    overall = {r.metric: r for r in rows if r.scope == "all"}
    assert overall["correctness"].diff.n == 2 and overall["correctness"].partial  # i2 unscored in b
    assert overall["correctness"].diff.delta == pytest.approx(1.0)  # (5-3 + 4-4) / 2
    assert overall["context_recall"].diff.delta == pytest.approx(-1 / 3)
    assert [(c.id, c.metric, c.a, c.b) for c in changes] == [
        ("i1", "correctness", 3, 5),
        ("i3", "context_recall", 1.0, 0.0),
    ]


def test_two_concurrent_promotions_cannot_both_beat_the_same_champion(tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    store = open_store(load_config(root))
    log_eval(store, "v1", BASE)
    decide(store, "v1", Rule(), dry_run=False, lock_dir=tmp_path)
    _, mv2 = log_eval(store, "v2", [4] * 8)
    _, mv3 = log_eval(store, "v3", [5] * 8)
    cmd = [sys.executable, "-m", "ragtrack.cli", "--root", str(root), "promote"]
    procs = [
        subprocess.Popen([*cmd, v], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for v in ("v2", "v3")
    ]
    outputs = [p.communicate(timeout=180)[0] for p in procs]
    decisions = store.client.search_runs(
        [store.decisions_experiment_id], "tags.`ragtrack.kind` = 'promotion' and tags.`ragtrack.outcome` = 'promoted'"
    )
    beaten = [r.data.params["champion"] for r in decisions if r.data.params["version"] in ("v2", "v3")]
    assert len(beaten) == len(set(beaten)), (beaten, outputs)  # nobody won against a stale champion
    assert current_champion(store)[0] == mv3  # whatever the order, the best one ends as champion
    assert store.client.get_model_version_by_alias(store.registered_model, ALIAS).version == int(mv3)
    assert Path(str(store.tracking_uri).removeprefix("sqlite:///")).with_name("promote.lock").exists()


def test_items_with_full_marks_in_every_listed_version_are_retired(project):
    evaluate("v1", root=project)
    evaluate("v3", root=project)
    store = open_store(load_config(project))
    full = {
        v: {
            r.id
            for r in load_records(store, latest_eval_run(store, v).run_id)
            if r.retrieval["context_recall"] == 1.0 and r.judges["correctness"].score == 5
        }
        for v in ("v1", "v3")
    }
    ids = retirement_candidates(["v1", "v3"], root=project)
    assert set(ids) == full["v1"] & full["v3"]
    if not ids:  # make the move itself checkable even when no item qualifies
        ids = ["a1"]
    regression = retire(ids, root=project)
    corpus = load_corpus(project / "golden" / "kb")
    left = load_golden(project / "golden" / "golden.jsonl", corpus)
    moved = load_golden(regression, corpus)
    assert {i.id for i in moved.items} == set(ids) and not {i.id for i in left.items} & set(ids)
    assert len(left) + len(moved) == 5
