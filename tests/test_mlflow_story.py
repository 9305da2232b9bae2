"""What ragtrack writes where the stock MLflow UI shows it, read back from a real store (SQLite in a temp dir).

Two versions are evaluated and one promotion is refused: every item is one trace whose spans are the agent's
real stages, judge verdicts are numeric feedback with their reasons, the eval run describes itself against the
champion (with the same figures ``compare`` computes), and the model versions say why they are champion or not.
"""

from __future__ import annotations

import json
from dataclasses import replace

import mlflow
import pytest
from mlflow.entities import SpanType

from ragtrack.api import compare, evaluate, promote
from ragtrack.config import load_config
from ragtrack.evaluation import metrics as m
from ragtrack.evaluation.judges import HEURISTIC_VERSION
from ragtrack.records import ItemRecord
from ragtrack.tracking import traces
from ragtrack.tracking.standings import VERSIONS_VIEW
from ragtrack.tracking.store import Tag, open_store

from .conftest import make_project


@pytest.fixture(scope="module")
def story(tmp_path_factory):
    """The README session's order (both versions evaluated, then promoted), and v3 evaluated once more."""
    root = make_project(tmp_path_factory.mktemp("story") / "project")
    v1 = evaluate("v1", root=root)
    early = evaluate("v3", root=root)  # no champion yet when it is recorded
    before = store_of(root).client.get_run(early.run_id).data.tags[Tag.NOTE]
    first = promote("v1", root=root)
    v3 = evaluate("v3", root=root)  # compared with the champion when it is recorded
    refused = promote("v3", root=root)
    assert first.promoted and not refused.promoted  # the tiny set: v3 loses one correctness point on d1
    return root, v1, v3, refused, (early, before)


def store_of(root):
    return open_store(load_config(root))


def run_traces(run_id: str) -> dict[str, object]:
    found = mlflow.search_traces(run_id=run_id, return_type="list")
    return {t.info.tags[Tag.ITEM_ID]: t for t in found}


def test_each_item_is_one_trace_whose_spans_are_the_agents_stages(story):
    root, _, v3, _, _ = story
    store_of(root)
    by_item = run_traces(v3.run_id)
    assert sorted(by_item) == sorted(r.id for r in v3.records)
    for r in v3.records:
        trace = by_item[r.id]
        assert trace.info.tags[Tag.ITEM_TYPE] == r.type and trace.info.tags[Tag.VERSION] == "v3"
        top, *spans = trace.data.spans
        assert top.span_type == SpanType.AGENT and top.inputs["question"] == r.question and top.outputs == r.answer
        assert [(s.name, s.span_type) for s in spans] == [("retrieve", "RETRIEVER"), ("generate", "LLM")]
        for span, stage in zip(spans, r.stages, strict=True):  # the recorded times, not made-up ones
            assert (span.start_time_ns, span.end_time_ns) == (stage.start_ns, stage.end_ns)
        assert (top.start_time_ns, top.end_time_ns) == (r.stages[0].start_ns, r.stages[-1].end_ns)
        # The retriever span returns documents in MLflow's shape, with the canonical passages they cover.
        docs = spans[0].outputs
        assert [doc["id"] for doc in docs] == r.retrieved_unit_ids
        assert [doc["metadata"]["passage_ids"] for doc in docs] == [c.passage_ids for c in r.contexts]
        assert all(doc["page_content"] == c.text for doc, c in zip(docs, r.contexts, strict=True))
        gt = set(r.gt_context_ids)
        assert [doc["metadata"]["gt_passage_ids"] for doc in docs] == [
            [p for p in c.passage_ids if p in gt] for c in r.contexts
        ]


def test_judge_verdicts_are_numeric_feedback_with_the_reason_and_the_golden_item_is_the_expectation(story):
    root, _, v3, _, _ = story
    store_of(root)
    by_item = run_traces(v3.run_id)
    for r in v3.records:
        found = {a.name: a for a in by_item[r.id].info.assessments}
        for judge, verdict in r.judges.items():
            feedback = found[traces.judge_feedback(judge)]
            assert feedback.value == verdict.score and isinstance(feedback.value, int)
            assert (
                feedback.rationale == verdict.reason and feedback.source.source_id == f"heuristic@{HEURISTIC_VERSION}"
            )
        assert found[traces.retrieval_feedback("context_recall")].value == r.retrieval["context_recall"]
        assert found[traces.retrieval_feedback("reciprocal_rank")].rationale == traces.retrieval_rationale(r)
        assert found[traces.EXPECTED_ANSWER].value == r.gt_answer
        assert found[traces.EXPECTED_PASSAGES].value == r.gt_context_ids


def test_a_traces_assessments_keep_their_order_and_name_the_root_span(story):
    """Written in one go with the trace, they still come one after another: expectations, retrieval
    feedback, then the judges last to first, so the UI (newest first) lists the judges in order."""
    root, _, v3, _, _ = story
    store_of(root)
    by_item = run_traces(v3.run_id)
    for r in v3.records:
        trace = by_item[r.id]
        made = sorted(trace.info.assessments, key=lambda a: a.create_time_ms)
        assert len({a.create_time_ms for a in made}) == len(made), "each its own moment"
        expected = [traces.EXPECTED_ANSWER, traces.EXPECTED_PASSAGES]
        expected += [traces.retrieval_feedback(k) for k, v in reversed(r.retrieval.items()) if v is not None]
        expected += [traces.judge_feedback(j) for j in reversed(r.judges)]
        assert [a.name for a in made] == expected
        root_span = next(s for s in trace.data.spans if s.parent_id is None)
        assert {a.span_id for a in made} == {root_span.span_id}


def test_a_trace_is_found_by_its_item_id(story):
    root, _, v3, _, _ = story
    store = store_of(root)
    [trace] = store.client.search_traces(
        locations=[store.experiment_id], run_id=v3.run_id, filter_string=f"tags.`{Tag.ITEM_ID}` = 'c1'"
    )
    assert trace.info.tags[Tag.ITEM_TYPE] == "C"


def test_traces_are_logged_once_per_item_however_often_a_run_is_recorded(story):
    root, _, v3, _, _ = story
    store = store_of(root)
    run = store.run_summary(v3.run_id)
    assert traces.log_traces(store, run, None, v3.records, "heuristic") == 0  # all five already there
    # A run that stopped early logs what it finished; its resumed finish adds only the rest.
    run_id = store.start_run("eval v3 (partial)", {}, {Tag.KIND: "eval-test"})
    partial = store.run_summary(run_id)
    assert traces.log_traces(store, partial, None, v3.records[:2], "heuristic") == 2
    assert traces.log_traces(store, partial, None, v3.records, "heuristic") == 3
    assert sorted(run_traces(run_id)) == sorted(r.id for r in v3.records)
    # A record read back from a checkpoint is the record that was traced: no resume re-logs it.
    assert [ItemRecord.from_json(json.loads(json.dumps(r.to_json()))).digest for r in v3.records] == [
        r.digest for r in v3.records
    ]
    # An item asked again on resume (a judge had failed) has a new record with the same assessments'
    # names: its old trace names the old record's digest, and gives way to the new one's.
    redone = replace(v3.records[0], judges={**v3.records[0].judges})
    redone.judges["correctness"] = replace(redone.judges["correctness"], reason="asked again")
    assert traces.log_traces(store, partial, None, [redone, *v3.records[1:]], "heuristic") == 1
    tagged = {i: [t.tags[Tag.RECORD] for t in ts] for i, ts in traces.item_traces(store, run_id).items()}
    assert tagged == {r.id: [r.digest] for r in [redone, *v3.records[1:]]}

    # Killed while spans were written: a trace keeps its info and assessments but lacks spans, and
    # MLflow cannot open it. Made for real in the SQLite store (the rows a kill leaves unwritten);
    # the next finish traces those items again, whole.
    import sqlite3

    by_item = {i: ts[0].trace_id for i, ts in traces.item_traces(store, run_id).items()}
    lost, short = by_item[v3.records[1].id], by_item[v3.records[2].id]
    with sqlite3.connect(root / "mlruns" / "mlflow.db") as db:
        db.execute("DELETE FROM spans WHERE trace_id = ?", (lost,))
        db.execute("DELETE FROM spans WHERE trace_id = ? AND parent_span_id IS NOT NULL", (short,))
    assert traces.log_traces(store, partial, None, [redone, *v3.records[1:]], "heuristic") == 2
    whole = {
        t.info.tags[Tag.ITEM_ID]: len(t.data.spans) for t in mlflow.search_traces(run_id=run_id, return_type="list")
    }
    assert whole == {r.id: 1 + len(r.stages) for r in [redone, *v3.records[1:]]}


def test_the_eval_run_describes_itself_against_the_champion_with_the_figures_compare_computes(story):
    root, v1, v3, refused, _ = story
    store = store_of(root)
    run = store.client.get_run(v3.run_id)
    note = run.data.tags[Tag.NOTE]
    report = compare("v1", "v3", root=root, log=False)
    row = {(r.metric, r.scope): r.diff for r in report.rows}
    assert report.run_id == "" and report.text().startswith(f"v1 ({report.a.run_id}) vs v3 ({report.b.run_id})")
    c = row[("correctness", "all")]
    assert note.splitlines()[0].startswith(f"**v3**: correctness (1–5) {v3.metrics['correctness']:.2f}")
    assert note.splitlines()[1].startswith(
        f"Against champion **v1**: correctness Δ **{c.delta:+.3f}** "
        f"(95% CI [{c.ci_low:+.3f}, {c.ci_high:+.3f}], p {c.p_text})"
    )
    assert f"`ragtrack promote v3` would refuse it: {refused.reasons[0]}" in note  # what promote then decided
    d = row[("correctness", "D")]
    gap = "\u00a0" * 3
    assert f"| ↳ type D | {gap}{d.mean_a:.2f} | {gap}{d.mean_b:.2f} | {gap}{d.delta:+.3f}" in note
    assert "**Diagnosis**" in note and "**Scores** (judges 1–5, retrieval 0–1)" in note

    # The same comparison as metrics on the run, against the champion's model version named in a tag.
    metrics = run.data.metrics
    for figure, value in zip(m.COMPARISON_FIGURES, (c.delta, c.ci_low, c.ci_high, c.p_value), strict=True):
        assert metrics[m.comparison_key(figure, "correctness")] == pytest.approx(m.for_display(value))
    assert run.data.tags[Tag.COMPARED_TO] == v1.model_version and run.data.tags[Tag.COMPARED_RUN] == v1.run_id
    assert m.comparison_key("delta", "context_precision") not in metrics  # deltas for the core metrics only

    # v1's eval was recorded with no champion ("would promote it"); once promoted, its page says so.
    first_run = store.client.get_run(v1.run_id).data.tags[Tag.NOTE]
    assert first_run.splitlines()[1] == "This model version is the champion (v1)."
    assert first_run.count("is the champion") == 1 and "would promote" not in first_run


def test_an_eval_recorded_before_there_was_a_champion_is_compared_once_one_is_promoted(story):
    root, v1, v3, _, (early, before) = story
    store = store_of(root)
    assert before.splitlines()[1].startswith("`ragtrack promote v3` would promote it: no champion yet")
    run = store.client.get_run(early.run_id)
    note = run.data.tags[Tag.NOTE]
    later = store.client.get_run(v3.run_id).data.tags[Tag.NOTE]  # same answers, compared when recorded
    assert note.splitlines()[1].startswith("Against champion **v1**: correctness Δ")
    assert note.splitlines()[1] == later.splitlines()[1] and "Champion's eval" in note
    assert run.data.tags[Tag.COMPARED_TO] == v1.model_version
    assert run.data.metrics[m.comparison_key("delta", "correctness")] == m.for_display(
        v3.metrics["correctness"] - v1.metrics["correctness"]
    )


def test_metrics_are_logged_headline_first_and_accounting_last_rounded_for_reading(story):
    root, _, v3, _, _ = story
    store = store_of(root)
    logged = store.client.get_run(v3.run_id).data.metrics  # in the order they were first logged
    keys = list(logged)
    assert keys[:4] == list(m.CORE) and keys == m.display_order(keys)
    usage = [k for k in keys if k.startswith("usage/")]
    assert usage and keys[-len(usage) :] == usage and not any(k.startswith("llm/") for k in keys)
    assert set(logged) == set(v3.metrics) | {k for k in logged if k.startswith("delta")}
    for name, value in v3.metrics.items():  # to three decimals: decisions pair the items' own scores
        assert logged[name] == m.for_display(value) and len(repr(logged[name]).partition(".")[2]) <= 3, name


def test_the_eval_run_keeps_a_per_type_plot_an_items_table_and_its_inputs(story):
    root, _, v3, _, _ = story
    store = store_of(root)
    paths = {f.path for f in store.client.list_artifacts(v3.run_id)}
    assert {"per_type.png", "items_table.json", "items.jsonl", "diagnosis.md"} <= paths
    run = store.client.get_run(v3.run_id)
    assert run.data.tags[Tag.RUN_TYPE] == "genai_evaluate"  # listed under "Evaluation runs"
    [dataset] = run.inputs.dataset_inputs
    assert dataset.dataset.digest == v3.params["golden_digest"]
    assert [i.model_id for i in run.inputs.model_inputs] == [run.data.tags[Tag.MODEL_ID]]


def test_model_versions_say_why_they_are_champion_or_not_and_link_the_decision(story):
    root, v1, v3, refused, _ = story
    store = store_of(root)
    champ = store.client.get_model_version(store.registered_model, v1.model_version).description
    lines = champ.splitlines()
    assert lines[0].startswith("v1 is the champion since ")
    assert f"v3 refused over v1 (model version {v1.model_version})" in champ  # the challenge it withstood

    loser = store.client.get_model_version(store.registered_model, v3.model_version).description
    assert loser.splitlines()[0] == f"v3 is not the champion: v1 (model version {v1.model_version}) is"
    f = refused.figures
    assert (
        f"- correctness {f['challenger_correctness_paired']:.3f} vs {f['champion_correctness']:.3f}: "
        f"Δ {f['correctness_delta']:+.3f}, 95% CI [{f['correctness_ci_low']:+.3f}, {f['correctness_ci_high']:+.3f}]"
    ) in loser
    assert f"- rule: {refused.rule}" in loser and f"- refused because: {refused.reasons[0]}" in loser
    assert f"(#/runs/{refused.decision_run_id})" in loser and f"(#/runs/{v3.run_id})" in loser

    model = store.client.get_registered_model(store.registered_model).description
    assert model.startswith(f"### Champion: v1 (model version [{v1.model_version}]")
    assert "v1 promoted: no champion yet" in model

    # A dry run decides nothing: the descriptions stay as they are.
    assert not promote("v3", root=root, dry_run=True).promoted
    assert store.client.get_model_version(store.registered_model, v3.model_version).description == loser


def test_each_logged_model_links_the_eval_runs_that_measured_it(story):
    root, _, v3, _, _ = story
    store = store_of(root)
    model_id = store.client.get_run(v3.run_id).data.tags[Tag.MODEL_ID]
    note = mlflow.get_logged_model(model_id).tags[Tag.NOTE]
    assert note.startswith("**v3**") and f"[{v3.run_id[:8]}](#/runs/{v3.run_id})" in note
    assert f"{v3.metrics['correctness']:.2f}" in note


def test_the_experiment_opens_on_a_leaderboard_and_a_saved_view_of_the_versions(story):
    root, v1, v3, _, _ = story
    store = store_of(root)
    experiment = store.client.get_experiment(store.experiment_id)
    note = experiment.tags[Tag.NOTE]
    assert note.startswith("Champion: **v1** since ")
    assert f"viewStateShareKey={VERSIONS_VIEW}" in note.splitlines()[0]
    assert "| **v1** ★ |" in note and f"[{v3.run_id[:8]}](#/runs/{v3.run_id})" in note
    view = json.loads(experiment.tags[f"mlflow.sharedViewState.{VERSIONS_VIEW}"])
    columns = json.loads(view["state"])["selectedColumns"]
    assert columns[:3] == ["tags.`ragtrack.version`", "metrics.`correctness`", "metrics.`groundedness`"]
    assert "metrics.`delta_ci_low/correctness`" in columns and view["name"] == "ragtrack: versions side by side"


def test_the_leaderboard_stays_on_the_champions_full_eval_after_a_quick_limited_one(tmp_path):
    """A `--limit 2` eval of the champion made it the reference: one row, the champion perfect, v3 gone."""
    root = make_project(tmp_path / "project")
    v1 = evaluate("v1", root=root)
    assert promote("v1", root=root).promoted
    v3 = evaluate("v3", root=root)
    quick = evaluate("v1", root=root, limit=2)
    store = store_of(root)
    note = store.client.get_experiment(store.experiment_id).tags[Tag.NOTE]
    assert f"[{v1.run_id[:8]}]" in note and f"[{v3.run_id[:8]}]" in note, note
    assert f"[{quick.run_id[:8]}]" not in note and f"golden set `{v1.params['golden_digest']}`" in note


def test_an_eval_of_more_items_than_mlflows_trace_queue_holds_keeps_every_trace(tmp_path, monkeypatch):
    """MLflow's asynchronous exporter drops a trace handed to it while its queue is full (1 000 by default:
    an eval of 1 000 CMRC questions lost 360). Here it holds 4 export tasks and one worker writes them: a
    trace of v1 is 4 tasks (its root span, 2 stages, the trace), so the items go one at a time."""
    from mlflow.tracing import provider

    root = make_project(tmp_path / "project")
    monkeypatch.setenv("MLFLOW_ASYNC_TRACE_LOGGING_MAX_QUEUE_SIZE", "4")
    monkeypatch.setenv("MLFLOW_ASYNC_TRACE_LOGGING_MAX_WORKERS", "1")
    provider.reset()  # the exporter, and its queue, are made again with the size above
    try:
        report = evaluate("v1", root=root)
    finally:
        monkeypatch.undo()
        provider.reset()
    assert report.complete and sorted(run_traces(report.run_id)) == sorted(r.id for r in report.records)


def test_an_eval_run_logged_before_the_metric_prefixes_reads_back_under_todays_names(tmp_path):
    """Runs logged before secondary figures moved under prefixes (``correctness_n``, ``items``) still
    say how many items a judge scored: promotion's partial-mean check reads today's names."""
    from ragtrack.evaluation.promotion import partial_means

    store = store_of(make_project(tmp_path / "old"))
    tags = {Tag.KIND: "eval", Tag.VERSION: "v1", Tag.COMPLETE: "true"}
    run_id = store.start_run("eval v1", {}, tags)
    legacy = {"correctness": 2.5, "correctness_n": 3.0, "groundedness_n": 4.0, "items": 4.0, "items/type_A": 4.0}
    store.client.log_batch(run_id, metrics=[mlflow.entities.Metric(k, v, 0, 0) for k, v in legacy.items()])
    [run] = store.eval_runs("v1")
    assert run.metrics == {
        "correctness": 2.5,
        "counts/judged/correctness": 3.0,
        "counts/judged/groundedness": 4.0,
        "counts/items": 4.0,
        "counts/items/type_A": 4.0,
    }
    assert partial_means(run) == ["correctness"]


def test_the_per_type_chart_is_drawn_in_one_pass_at_its_size(tmp_path, monkeypatch):
    """``tight_layout`` drew the whole figure once to fit it and ``savefig`` drew it again. A wrapper
    that counts the figure's drawing passes (and draws) shows one."""
    from matplotlib.figure import Figure
    from PIL import Image

    from ragtrack.records import RunSummary
    from ragtrack.tracking.compare import per_type_plot

    draws = []
    draw = Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda self, renderer: (draws.append(1), draw(self, renderer))[1])
    names = ("norm/correctness", "norm/groundedness", "context_recall", "mrr")
    scores = {m.key(n, s): 0.5 for n in names for s in [m.ALL, *m.TYPES]} | {m.key(m.ITEMS, t): 4.0 for t in m.TYPES}
    runs = [RunSummary(f"r{v}", v, "g", "j", "0.5", False, "1", scores) for v in ("v1", "v5")]
    per_type_plot(runs, tmp_path / "per_type.png")
    assert len(draws) == 1
    assert Image.open(tmp_path / "per_type.png").size == (4 * len(names) * 110, round(3.4 * 110))
