"""Paired statistics, comparison and the promotion gate.

The rule is a pure function: its tests build run summaries and paired
differences by hand, with no MLflow. Applying it to a store (the alias, the
lock, the recorded decision) is tested on a real SQLite store and registry,
with eval runs logged from hand-chosen per-item scores so every decision can
be checked by hand.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from ragtrack.api import evaluate, retire, retirement_candidates
from ragtrack.config import load_config
from ragtrack.corpus import load_corpus
from ragtrack.errors import RagtrackError
from ragtrack.evaluation.aggregate import aggregate
from ragtrack.evaluation.compare import compare_records, overall
from ragtrack.evaluation.promotion import ALIAS, Champion, Rule, decide, overrides
from ragtrack.evaluation.stats import compare_paired, paired_permutation_p, t_interval
from ragtrack.golden import load_golden
from ragtrack.records import ContextRecord, ItemRecord, JudgeRecord, RunSummary
from ragtrack.tracking import runs
from ragtrack.tracking.promotion import promote as promote_in_store
from ragtrack.tracking.store import Tag, open_store

from .conftest import git_checkout

# ---------------------------------------------------------------- statistics, by hand


def test_permutation_p_is_exact_for_small_n():
    # d = (1, 1, 1): of the 8 sign patterns only +++ and --- reach |mean| >= 1.
    assert paired_permutation_p([1, 1, 1]) == pytest.approx(2 / 8)
    # d = (2, -1): |mean| 0.5; patterns: (+2,-1)=.5 (-2,+1)=.5 (+2,+1)=1.5 (-2,-1)=1.5 -> all 4 >= .5
    assert paired_permutation_p([2, -1]) == 1.0
    assert paired_permutation_p([0, 0, 0]) == 1.0


def test_the_interval_brackets_the_mean_and_collapses_for_constant_differences():
    assert t_interval([0.5] * 6) == (0.5, 0.5)  # compare prints "no variation" there, not this
    low, high = t_interval([1, 0, 0, 1, 1, 0, 1, 1])
    assert low < 0.625 < high
    d = compare_paired([1, 2, 3], [2, 3, 5])
    assert d.delta == pytest.approx(4 / 3) and d.mean_a == 2 and d.mean_b == pytest.approx(10 / 3)


def test_the_same_scores_give_the_same_figures_whatever_was_compared_in_between():
    """The resampling is seeded: a comparison's figures depend on its scores only, not on earlier calls."""
    a, b = [i % 5 for i in range(20)], [(i * 7) % 5 for i in range(20)]  # 20 items: the Monte Carlo test
    first = compare_paired(a, b)
    compare_paired([1, 2, 3], [3, 2, 1])  # another item count in between
    assert compare_paired(a, b) == first == compare_paired(a, b)


# ---------------------------------------------------------------- records and runs by hand


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
        contexts=[ContextRecord("u", "text", ["p"])] if recall else [],
        retrieval={
            "context_recall": recall,
            "context_precision": recall,
            "reciprocal_rank": recall,
            "hit_rate": recall,
            "ndcg_at_k": recall,
        },
        judges={"correctness": verdict(correctness), "groundedness": verdict(groundedness)},
    )


def records(correctness, groundedness=None) -> list[ItemRecord]:
    groundedness = groundedness or [5] * len(correctness)
    pairs = zip(correctness, groundedness, strict=True)
    return [record(f"i{n}", "ABCD"[n % 4], c, g) for n, (c, g) in enumerate(pairs)]


def summary(version, recs, *, digest="g1", judge="heuristic@h1", substituted=False, model_version=None, limited=""):
    return RunSummary(
        run_id=f"run-{version}",
        version=version,
        golden_digest=digest,
        judge_identity=judge,
        min_overlap="0.5",
        substituted=substituted,
        model_version=model_version or version.removeprefix("v"),
        metrics=aggregate(recs, ("correctness", "groundedness")),
        limited=limited,
    )


def rule_decides(challenger: list, champion: list | None = None, rule: Rule | None = None, **run):
    """The pure rule on two hand-made runs (the champion is v1, the challenger v2)."""
    rule = rule or Rule()
    ours = records(*challenger)
    mine = summary("v2", ours, **run)
    if champion is None:
        return decide(mine, None, rule)
    theirs = records(*champion)
    rows, _ = compare_records(theirs, ours, ("correctness", "groundedness"))
    return decide(mine, Champion("1", "v1", summary("v1", theirs)), rule, overall(rows))


BASE = [3, 3, 3, 3, 3, 3, 3, 3]

# ---------------------------------------------------------------- the rule, pure


def test_no_champion_the_first_version_wins():
    d = rule_decides([BASE])
    assert d.promoted and "no champion yet" in d.reasons[0]


def test_better_correctness_without_groundedness_regression_wins():
    d = rule_decides([[4, 4, 3, 4, 3, 4, 4, 4]], [BASE])
    assert d.promoted, d.reasons
    assert d.figures["champion_correctness"] == 3 and d.figures["correctness_delta"] == pytest.approx(0.75)


def test_equal_correctness_is_not_enough_and_margin_applies():
    d = rule_decides([BASE], [BASE])
    assert not d.promoted and "does not beat the margin 0" in d.reasons[0]
    gain = [4, 3, 3, 3, 3, 3, 3, 3]  # +0.125
    assert not rule_decides([gain], [BASE], Rule(margin=0.2)).promoted
    assert rule_decides([gain], [BASE], Rule(margin=0.1)).promoted


def test_groundedness_regression_refuses_unless_within_tolerance():
    challenger = ([5] * 8, [5, 5, 5, 5, 5, 5, 4, 4])  # groundedness -0.25
    d = rule_decides(challenger, [BASE])
    assert not d.promoted and "groundedness regressed" in " ".join(d.reasons)
    assert rule_decides(challenger, [BASE], Rule(tolerance=0.25)).promoted


def test_significance_can_be_required():
    noise = [5, 3, 3, 3, 3, 3, 3, 2]  # +0.125 from one item up, one down
    d = rule_decides([noise], [BASE], Rule(require_significance=True))
    assert not d.promoted and "not significant" in " ".join(d.reasons)
    assert rule_decides([noise], [BASE]).promoted


def test_runs_on_different_golden_sets_or_judges_are_not_compared():
    d = rule_decides([[5] * 8], [BASE], digest="other")
    assert not d.promoted and "different golden sets" in " ".join(d.reasons)
    d = rule_decides([[5] * 8], [BASE], judge="openai:gpt|prompts=abc|t=0.0")
    assert not d.promoted and "different judges" in " ".join(d.reasons)
    champion = Champion("1", "v1", None)  # the champion has no eval on the challenger's golden set
    d = decide(summary("v2", records([5] * 8)), champion, Rule())
    assert not d.promoted and "has no eval on the golden set of v2's run" in d.reasons[0]


def test_substituted_models_and_partial_means_refuse_unless_allowed():
    d = rule_decides([[5] * 8], [BASE], substituted=True)
    assert not d.promoted and "substituted" in d.reasons[0]
    assert rule_decides([[5] * 8], [BASE], Rule(allow_substitutes=True), substituted=True).promoted
    d = rule_decides([[5, 5, 5, 5, 5, 5, 5, None]], [BASE])  # one judge error: mean over 7 of 8
    assert not d.promoted and "fewer than all items (judge errors)" in d.reasons[0]
    assert rule_decides([[5, 5, 5, 5, 5, 5, 5, None]], [BASE], Rule(allow_partial=True)).promoted


def test_a_decision_names_each_override_that_applied_and_what_it_waived():
    d = rule_decides([[5] * 8], [BASE], Rule(allow_substitutes=True, margin=-0.1, tolerance=0.5), substituted=True)
    assert d.promoted and d.overrides == [
        "--allow-substitutes: v2's eval used substituted models",
        "--margin -0.1: correctness must beat the champion by -0.1, not 0",
        "--tolerance 0.5: groundedness may drop by 0.5, not 0",
    ]
    assert d.flags == "--allow-substitutes --margin -0.1 --tolerance 0.5"
    assert d.summary().startswith(
        "v2 promoted over v1 (model version 1) [overrides: --allow-substitutes: v2's eval used substituted models; "
    )
    # A flag with nothing to allow waived nothing: it is not an override of this decision.
    plain = rule_decides([[5] * 8], [BASE], Rule(allow_substitutes=True, allow_partial=True))
    assert plain.overrides == [] and plain.flags == "" and "[overrides" not in plain.summary()
    partial = rule_decides([[5, 5, 5, 5, 5, 5, 5, None]], [BASE], Rule(allow_partial=True), limited="8 of 9")
    assert partial.overrides == [
        "--allow-partial: v2's correctness mean covers fewer than all items",
        "--allow-partial: v2's eval answered 8 of 9 golden items (--limit)",
    ]
    assert partial.flags == "--allow-partial"
    swapped = replace(summary("v2", records([5] * 8), substituted=True), substitutions="rerank_model `x` → `none`")
    assert overrides(swapped, None, Rule(allow_substitutes=True)) == [
        "--allow-substitutes: v2's eval used substituted models (rerank_model `x` → `none`)"
    ]


def test_a_run_whose_agent_gave_no_answer_to_some_questions_is_not_promoted_on_the_others():
    """Three failed calls are not judged (never scored 1, never left out silently): the means over
    the other five would promote a version that could not answer; the rule says why it refuses."""
    ours = records([5] * 8)
    for r in ours[:3]:
        r.answered, r.judges, r.errors = False, {}, ["python: ConnectionError: index server down"]
    mine = summary("v2", ours)
    assert mine.metrics["counts/unanswered"] == 3 and mine.metrics["counts/judged/correctness"] == 5
    assert mine.metrics["correctness"] == 5 and mine.metrics["counts/agent_errors"] == 3
    theirs = records(BASE)
    rows, _ = compare_records(theirs, ours, ("correctness", "groundedness"))
    d = decide(mine, Champion("1", "v1", summary("v1", theirs)), Rule(), overall(rows))
    assert not d.promoted and "correctness, groundedness mean covers fewer than all items" in d.reasons[0]
    assert "(3 questions got no answer)" in d.reasons[0]
    assert decide(mine, Champion("1", "v1", summary("v1", theirs)), Rule(allow_partial=True), overall(rows)).promoted


def test_release_gates_are_reported_per_gate():
    d = rule_decides([BASE], rule=Rule(gates={"context_recall": 0.9, "norm/correctness": 0.75}))
    assert not d.promoted
    assert [(g.metric, g.passed) for g in d.gates] == [("context_recall", True), ("norm/correctness", False)]
    assert "gate norm/correctness >= 0.75 failed (0.5)" in d.reasons


def test_the_champion_is_not_challenged_by_itself():
    ours = summary("v1", records(BASE), model_version="1")
    d = decide(ours, Champion("1", "v1", ours), Rule())
    assert not d.promoted and d.already_champion and d.accepted and d.outcome == "unchanged"
    assert d.summary() == "v1 is already the champion (model version 1): nothing to decide; the alias stays where it is"
    assert "figures" not in repr(d) and len(repr(d)) < 600  # printed in a notebook: the verdict, not every figure


def test_compare_records_pairs_items_and_flags_partial_judges():
    a = [record("i1", "A", 3), record("i2", "A", 2), record("i3", "B", 4)]
    b = [record("i1", "A", 5), record("i2", "A", None), record("i3", "B", 4, recall=0.0)]
    rows, changes = compare_records(a, b, ("correctness", "context_recall"))
    by_metric = {r.metric: r for r in rows if r.scope == "all"}
    assert by_metric["correctness"].diff.n == 2 and by_metric["correctness"].partial  # i2 unscored in b
    assert by_metric["correctness"].diff.delta == pytest.approx(1.0)  # (5-3 + 4-4) / 2
    assert by_metric["context_recall"].diff.delta == pytest.approx(-1 / 3)
    assert {r.scope for r in rows} == {"all", "A", "B"}
    assert [(c.id, c.metric, c.a, c.b) for c in changes] == [
        ("i1", "correctness", 3, 5),
        ("i3", "context_recall", 1.0, 0.0),
    ]


# ---------------------------------------------------------------- applied to a real store


def log_eval(
    store, version, correctness, groundedness=None, *, digest="g1", judge="heuristic@h1", edited=False, limited=""
):
    """Register ``version`` (once; again when its spec was ``edited``) and log a complete eval run with
    these per-item scores."""
    existing = store.model_versions(version)
    if existing and not edited:
        model_version = str(existing[0].version)
    else:
        with contextlib.suppress(Exception):  # already registered
            store.client.create_registered_model(store.registered_model)
        source = Path(store.tracking_uri.removeprefix("sqlite:///")).parent / "hand-models" / version
        source.mkdir(parents=True, exist_ok=True)
        mv = store.client.create_model_version(
            store.registered_model, source=source.as_uri(), tags={Tag.VERSION: version}
        )
        model_version = str(mv.version)
    recs = records(correctness, groundedness)
    tags = {  # what a real eval run carries, forged around hand-chosen scores
        Tag.KIND: "eval",
        Tag.VERSION: version,
        Tag.GOLDEN_DIGEST: digest,
        Tag.JUDGE_IDENTITY: judge,
        Tag.SUBSTITUTED: "false",
        Tag.MODEL_VERSION: model_version,
        **({Tag.LIMITED: limited} if limited else {}),
    }
    run_id = store.start_run(f"eval {version}", {"mapping_min_overlap": "0.5"}, tags)
    store.log_metrics(run_id, aggregate(recs, ("correctness", "groundedness")))
    runs.log_items(store, run_id, recs)
    store.finish_run(run_id)
    return run_id, model_version


@pytest.fixture
def store(tmp_path):
    return open_store(load_config(tmp_path))


def promote(store, tmp_path, version, dry_run=False, **rule):
    return promote_in_store(store, version, Rule(**rule), dry_run=dry_run)


def test_promotion_moves_the_alias_and_records_every_decision(store, tmp_path):
    run_id, mv = log_eval(store, "v1", BASE)
    d = promote(store, tmp_path, "v1")
    assert d.promoted and store.champion() == (mv, "v1")
    tags = store.client.get_model_version(store.registered_model, mv).tags
    assert tags[Tag.DECISION].startswith("promoted") and tags[Tag.DECISION_RUN] == d.decision_run_id
    decision_run = store.client.get_run(d.decision_run_id)
    assert decision_run.data.tags[Tag.KIND] == "promotion" and decision_run.data.params["challenger_run"] == run_id

    _, mv2 = log_eval(store, "v2", [4, 4, 3, 4, 3, 4, 4, 4])
    d = promote(store, tmp_path, "v2")
    assert d.promoted and store.champion()[0] == mv2 and d.figures["correctness_delta"] == pytest.approx(0.75)
    assert store.client.get_model_version(store.registered_model, mv).tags[Tag.LAST_CHALLENGE].startswith("v2 promoted")

    log_eval(store, "v3", BASE)  # worse than v2: refused, recorded, alias unchanged
    d = promote(store, tmp_path, "v3")
    assert not d.promoted and store.champion()[0] == mv2
    assert store.client.get_run(d.decision_run_id).data.tags[Tag.OUTCOME] == "refused"


def test_a_champion_without_an_eval_on_the_same_golden_set_refuses(store, tmp_path):
    log_eval(store, "v1", BASE)
    promote(store, tmp_path, "v1")
    log_eval(store, "v2", [5] * 8, digest="other")
    d = promote(store, tmp_path, "v2")
    assert not d.promoted and "has no eval on the golden set of v2's run" in d.reasons[0]


def test_the_champion_is_its_own_model_versions_eval_after_its_spec_was_edited_in_place(store, tmp_path):
    """The champion's eval was looked up by name: once v1's spec was edited (a new model version under
    the same name), v1's newest eval stood in for the champion, and v1 was compared with itself."""
    champion_run, champion_mv = log_eval(store, "v1", BASE)
    promote(store, tmp_path, "v1")
    edited_run, edited_mv = log_eval(store, "v1", [4] * 8, edited=True)
    assert edited_mv != champion_mv
    d = promote(store, tmp_path, "v1", dry_run=True)
    assert (d.run_id, d.champion_run_id, d.champion_model_version) == (edited_run, champion_run, champion_mv)
    assert d.promoted and d.figures["correctness_delta"] == pytest.approx(1.0)
    # It read "v1 would be promoted over v1 (model version 1)".
    assert d.summary().startswith(
        f"v1 (model version {edited_mv}) would be promoted over v1 (model version {champion_mv}): "
    )
    log_eval(store, "v2", [5] * 8)
    d = promote(store, tmp_path, "v2", dry_run=True)
    assert d.champion_run_id == champion_run and d.figures["correctness_delta"] == pytest.approx(2.0)

    # `versions` lists the champion beside its name's newest model version, each with its own evals
    # (it listed v1's newest only, marked nothing ★, and showed the edited spec's eval under it).
    from ragtrack.api import versions

    rows = [(r.version, r.model_version, r.champion, [e.run_id for e in r.last_evals]) for r in versions(root=tmp_path)]
    assert rows[:2] == [("v1", edited_mv, False, [edited_run]), ("v1", champion_mv, True, [champion_run])]


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"margin": "0.1"}, "margin must be a number, got '0.1'"),
        ({"margin": float("nan")}, "margin must be a number, got nan"),
        ({"tolerance": float("inf")}, "tolerance must be a number, got inf"),
        ({"tolerance": -0.5}, "tolerance is how much groundedness may drop: 0 or more, got -0.5"),
    ],
)
def test_a_rule_with_a_meaningless_margin_or_tolerance_is_refused_before_anything_is_logged(rule, message):
    """A string crashed in formatting, NaN was logged as the rule "+ nan", a negative tolerance refused ties."""
    from ragtrack.errors import RagtrackError

    with pytest.raises(RagtrackError, match=re.escape(message)):
        Rule(**rule)
    assert rule_decides([[4] * 8], [BASE], Rule(margin=-0.5)).promoted  # non-inferiority: allowed


def test_an_eval_cut_by_limit_decides_only_with_allow_partial():
    """A quick `--limit 4` eval of two versions was enough to move the alias, and nothing said so."""
    better = [[4, 4, 4, 4, 4, 4, 4, 4]]
    d = rule_decides(better, [BASE], limited="8 of 48")
    assert not d.promoted and d.reasons == [
        "v2's eval answered 8 of 48 golden items (--limit); decide on a full eval, or pass --allow-partial"
    ]
    assert rule_decides(better, [BASE], Rule(allow_partial=True), limited="8 of 48").promoted


def test_dry_run_decides_without_moving_the_alias_or_waiting_for_the_lock(store, tmp_path):
    log_eval(store, "v1", BASE)
    store.client.create_registered_model(f"{store.registered_model}.promotion-lock")  # held (or left by a crash)
    started = time.monotonic()
    d = promote(store, tmp_path, "v1", dry_run=True)
    assert d.promoted and d.dry_run and store.champion() is None
    assert time.monotonic() - started < 60, "a dry run waited for the lock (2 minutes, then failed)"


def test_two_concurrent_promotions_cannot_both_beat_the_same_champion(tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    store = open_store(load_config(root))
    log_eval(store, "v1", BASE)
    promote(store, tmp_path, "v1")
    log_eval(store, "v2", [4] * 8)
    _, mv3 = log_eval(store, "v3", [5] * 8)
    cmd = [sys.executable, "-m", "ragtrack.cli", "--root", str(root), "promote"]
    procs = [
        subprocess.Popen([*cmd, v], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for v in ("v2", "v3")
    ]
    outputs = [p.communicate(timeout=180)[0] for p in procs]
    decisions = store.search_runs(
        [store.decisions_experiment_id], f"tags.`{Tag.KIND}` = 'promotion' and tags.`{Tag.OUTCOME}` = 'promoted'"
    )
    beaten = [r.data.params["champion"] for r in decisions if r.data.params["version"] in ("v2", "v3")]
    assert len(beaten) == len(set(beaten)), (beaten, outputs)  # nobody won against a stale champion
    assert store.champion()[0] == mv3  # whatever the order, the best one ends as champion
    assert store.client.get_model_version_by_alias(store.registered_model, ALIAS).version == int(mv3)
    assert not store.client.search_registered_models("name LIKE '%promotion-lock'"), "the lock is released"


def test_items_with_full_marks_in_every_listed_version_are_retired(project):
    evaluate("v1", root=project)
    evaluate("v3", root=project)
    store = open_store(load_config(project))
    full = {
        v: {
            r.id
            for r in store.records(store.latest_eval(v).run_id)
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


def assert_lock_is_exclusive(config, tracking_uri: str | None = None) -> None:
    """Two holders of the promotion lock, each with its own client: the second gets in only after
    the first has left, and a lock whose holder died long ago is broken."""
    import threading

    first_in, events = threading.Event(), []

    def hold(name: str, wait_for: threading.Event | None) -> None:
        store = open_store(config, tracking_uri)  # its own client, like another process
        if wait_for is not None:
            wait_for.wait(30)
        with store.registry_lock("promotion", timeout_s=60):
            events.append(f"{name} in")
            first_in.set()
            time.sleep(1.0)  # hold it while the other one tries
            events.append(f"{name} out")

    threads = [threading.Thread(target=hold, args=("a", None)), threading.Thread(target=hold, args=("b", first_in))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert events == ["a in", "a out", "b in", "b out"], events

    store = open_store(config, tracking_uri)
    store.client.create_registered_model(f"{store.registered_model}.promotion-lock")  # a holder that died
    with store.registry_lock("promotion", stale_s=0):  # stale at once: broken, then taken
        assert store.client.get_registered_model(f"{store.registered_model}.promotion-lock")
    assert not store.client.search_registered_models("name LIKE '%promotion-lock'")


def test_the_promotion_lock_is_exclusive_on_a_local_store(tmp_path):
    assert_lock_is_exclusive(load_config(tmp_path))


def test_five_pairs_or_fewer_are_never_marked_significant():
    from ragtrack.evaluation.stats import compare_paired

    # Items better by one or two points: the t interval excludes 0, yet the smallest p of a
    # sign-flip test on 5 pairs is 2/32 = 0.0625.
    five = compare_paired([2, 2, 2, 2, 2], [3, 3, 4, 3, 3])
    assert five.ci_low > 0 and five.p_value == pytest.approx(0.0625)
    assert not five.testable and not five.significant
    six = compare_paired([2] * 6, [3, 3, 4, 3, 3, 3])
    assert six.testable and six.significant and six.p_value == pytest.approx(2 / 64)
    alike = compare_paired([2] * 6, [3] * 6)  # every pair +1: no variation, no interval, no mark
    assert not alike.varies and not alike.significant


def test_a_p_value_below_one_in_a_thousand_reads_as_such_never_as_zero():
    from ragtrack.evaluation.stats import compare_paired, p_text

    assert (p_text(0.00005), p_text(0.0012), p_text(0.5)) == ("<0.001", "0.001", "0.500")
    d = compare_paired([1.0] * 40, [5.0] * 40)  # 40 pairs: 20,000 sampled sign patterns, none as extreme
    assert d.p_value == pytest.approx(1 / 20_001) and d.p_text == "<0.001"


def test_a_quick_limited_eval_does_not_hide_the_full_one_from_promote(store, tmp_path):
    """A `--limit 3` check after the full eval made promote refuse ("answered 3 of 8") and advise
    evaluating the champion with --limit, which could not help either."""
    log_eval(store, "v1", BASE)
    promote(store, tmp_path, "v1")
    full, _ = log_eval(store, "v2", [4] * 8)
    quick, _ = log_eval(store, "v2", [5] * 3, [5] * 3, digest="g1-first-3", limited="3 of 8")
    d = promote(store, tmp_path, "v2", dry_run=True)
    assert d.run_id == full and d.promoted
    d = promote(store, tmp_path, "v2", dry_run=True, allow_partial=True)  # asked for: the newest, cut or not
    assert d.run_id == quick and not d.promoted


def test_promote_judges_the_spec_in_this_checkout_not_the_newest_eval_of_its_name(project):
    """Two CI jobs of one name share a store: promote judged whichever eval finished last, and told
    the other job "already the champion"."""
    from ragtrack.api import Progress
    from ragtrack.api import promote as promote_version
    from ragtrack.errors import RagtrackError

    spec = project / "pipelines" / "v3.toml"
    original = spec.read_text()
    mine = evaluate("v3", root=project)
    spec.write_text(original.replace("top_k = 3", "top_k = 2"))  # the other job's agent
    said: list[str] = []
    theirs = evaluate("v3", root=project, progress=Progress(on_warning=said.append))
    assert theirs.model_version != mine.model_version
    # Said at eval time, not found out at promotion ("v3 refused over v3").
    assert (
        f"v3 is registered as model version {theirs.model_version}: its spec differs from model version "
        f"{mine.model_version}: retrieval.top_k 3 → 2"
    ) in said
    spec.write_text(original)  # this checkout
    d = promote_version("v3", root=project, dry_run=True)
    assert (d.run_id, d.model_version) == (mine.run_id, mine.model_version)
    spec.write_text(original.replace("top_k = 3", "top_k = 4"))  # edited, never evaluated
    with pytest.raises(
        RagtrackError, match=r"v3.toml \(or a file it names.*\) has changed since v3 was last evaluated"
    ):
        promote_version("v3", root=project, dry_run=True)

    # A branch that keeps the champion's name is compared with it as `champion` (it was "both are v3").
    from ragtrack.api import compare

    spec.write_text(original)
    assert promote_version("v3", root=project).promoted
    spec.write_text(original.replace("top_k = 3", "top_k = 2"))  # the branch
    report = compare("champion", "v3", root=project)
    assert (report.a.run_id, report.b.run_id) == (mine.run_id, theirs.run_id)
    assert (report.a.version, report.b.version) == (f"v3@{mine.model_version}", f"v3@{theirs.model_version}")
    with pytest.raises(RagtrackError, match=r"both are v3 .*`ragtrack compare champion v3`"):
        compare("v3", "v3", root=project)
    # On the champion's own checkout (main after the merge, a re-run) there is nothing to compare, and
    # it is no failure: `ragtrack compare champion v3` exits 0 there, as promote does.
    from click.testing import CliRunner

    from ragtrack.cli import main

    spec.write_text(original)
    result = CliRunner().invoke(main, ["--root", str(project), "compare", "champion", "v3"])
    assert result.exit_code == 0 and f"v3 (model version {mine.model_version}) is the champion" in result.output
    with pytest.raises(RagtrackError, match="`champion` goes first"):
        compare("v3", "champion", root=project)


def test_a_champion_alias_removed_by_hand_is_noted_beside_the_verdict(store, tmp_path):
    """The next version was crowned "no champion yet" with nothing said of the champion before it."""
    log_eval(store, "v1", [4] * 8)
    promote(store, tmp_path, "v1")
    store.client.delete_registered_model_alias(store.registered_model, ALIAS)
    log_eval(store, "v2", BASE)  # worse than v1 was
    d = promote(store, tmp_path, "v2", dry_run=True)
    assert d.promoted and d.reasons[0].startswith("no champion yet")
    assert d.reasons[1].startswith("note: the champion alias is not set, though v1 (model version 1) was promoted")


def test_promoting_a_name_with_neither_spec_nor_eval_says_so(store, tmp_path):
    """It said "run: ragtrack eval --version v9", which then failed on the missing spec."""
    from ragtrack.api import promote as promote_version
    from ragtrack.errors import RagtrackError

    log_eval(store, "v1", BASE)
    said = r"no version 'v9': no eval of it in the store and no spec .*; evaluated: v1"
    with pytest.raises(RagtrackError, match=said):
        promote_version("v9", root=tmp_path)
    from ragtrack.api import compare

    with pytest.raises(RagtrackError, match=said):  # compare said "run: ragtrack eval --version v9" too
        compare("v1", "v9", root=tmp_path)
    assert promote_version("v1", root=tmp_path, dry_run=True).promoted  # a built-in name needs no file


def test_compare_says_when_no_item_of_a_type_was_judged_on_both_sides(store, tmp_path):
    """Eval's table showed "— (n=0/2)" for type B; compare simply had no type B row."""
    from ragtrack.api import compare

    log_eval(store, "v1", BASE)
    log_eval(store, "v2", [4, None, 4, 4, 4, None, 4, 4])  # i1 and i5, type B, got no correctness verdict
    report = compare("v1", "v2", root=tmp_path, log=False)
    assert ("correctness", "B") not in {(r.metric, r.scope) for r in report.rows}
    assert "type B: no item judged on both sides for correctness (0 of 2)" in report.warnings


def test_a_promotion_run_names_the_commit_that_decided(tmp_path):
    """Which CI job moved the champion could not be told: decision runs carried no source tags."""
    import shutil

    from ragtrack.api import promote as promote_here

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    head = git_checkout(tmp_path, "release", {".gitignore": "mlruns/\n.ragtrack/\n"})
    store = open_store(load_config(tmp_path))
    log_eval(store, "v1", BASE)
    d = promote_here("v1", root=tmp_path)
    tags = store.client.get_run(d.decision_run_id).data.tags
    assert d.promoted and tags["mlflow.source.git.commit"] == head and tags["mlflow.source.git.branch"] == "release"
    assert tags["ragtrack.git_dirty"] == "false"


def test_a_lock_left_by_a_process_killed_on_this_machine_is_broken_at_once(tmp_path):
    """A SIGKILLed promote (a CI job cancelled) left its lock: every promote for the next 10 minutes
    waited 120 s in silence and failed, naming a process that no longer existed."""
    script = tmp_path / "hold.py"
    script.write_text(
        "import sys, time\n"
        "from ragtrack.config import load_config\n"
        "from ragtrack.tracking.store import open_store\n"
        "with open_store(load_config(sys.argv[1])).registry_lock('promotion'):\n"
        "    print('held', flush=True)\n"
        "    time.sleep(120)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}  # the project's own store
    holder = subprocess.Popen([sys.executable, str(script), str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env)
    assert holder.stdout.readline().strip() == "held"
    holder.kill()  # SIGKILL: no finally runs, the lock stays in the registry
    holder.wait()
    store = open_store(load_config(tmp_path))
    assert store.client.get_registered_model(f"{store.registered_model}.promotion-lock")
    started = time.monotonic()
    with store.registry_lock("promotion", timeout_s=30):
        pass
    assert time.monotonic() - started < 10, "broken at once, not after stale_s"


def test_a_store_whose_lock_file_cannot_be_written_is_read_and_a_write_says_why(tmp_path):
    """A read-only project gave every command — `versions` too — a traceback and exit 1, and no --json.
    (A folder stands in for the unwritable lock file: as root, permission bits refuse nothing.)"""
    import json

    from click.testing import CliRunner

    from ragtrack.cli import main

    store = open_store(load_config(tmp_path))
    log_eval(store, "v1", BASE)
    lock = Path(store.tracking_uri.removeprefix("sqlite:///") + ".lock")
    lock.unlink(missing_ok=True)
    lock.mkdir()
    result = CliRunner().invoke(main, ["--root", str(tmp_path), "versions"])
    assert result.exit_code == 0 and "v1" in result.output, result.output
    out = tmp_path / "decision.json"
    result = CliRunner().invoke(main, ["--root", str(tmp_path), "promote", "v1", "--json", str(out)])
    assert result.exit_code == 2 and f"error: Is a directory: {lock}" in result.output, result.output
    assert "Traceback" not in result.output and json.loads(out.read_text())["exit_status"] == 2


def test_runs_redescribed_after_a_promotion_say_what_plain_promote_would_decide(store, tmp_path):
    """After `promote v3 --margin -1`, v2's run page said "`ragtrack promote v2` would promote it" by
    that one-off margin; `ragtrack promote v2` refused."""
    log_eval(store, "v1", [3] * 8)
    promote(store, tmp_path, "v1")
    v2_run, _ = log_eval(store, "v2", [3] * 7 + [2])  # a little worse than v3 below
    log_eval(store, "v3", [3] * 8)
    assert promote(store, tmp_path, "v3", margin=-1).promoted  # equal to v1: promoted only by the margin
    note = store.client.get_run(v2_run).data.tags[Tag.NOTE]
    assert "would refuse" in note and "would promote" not in note
    assert not promote(store, tmp_path, "v2", dry_run=True).promoted


def test_an_eval_whose_records_are_gone_names_the_run_and_the_eval_to_run(store, tmp_path):
    """A deleted artifact folder made compare and promote say "Failed to download artifacts from path
    'items.jsonl', please ensure that the path is correct", naming neither the run nor the fix."""
    import shutil

    log_eval(store, "v1", BASE)
    promote(store, tmp_path, "v1")
    run_id, _ = log_eval(store, "v2", [5] * 8)
    shutil.rmtree(Path(store.client.get_run(run_id).info.artifact_uri.removeprefix("file://")))
    with pytest.raises(RagtrackError, match=rf"records of v2's eval run {run_id} .*--version v2 --fresh"):
        promote(store, tmp_path, "v2")


def test_a_failed_store_write_is_said_by_its_cause_not_by_sqlalchemys_flush_note():
    from ragtrack.cli import _cause_line

    message = (
        "(raised as a result of Query-invoked autoflush; consider using a session.no_autoflush block if this "
        "flush is occurring prematurely)\n(sqlite3.OperationalError) database or disk is full\n[SQL: INSERT …]"
    )
    assert _cause_line(message) == "(sqlite3.OperationalError) database or disk is full"
    assert _cause_line("Run 'x' not found\nmore") == "Run 'x' not found"
