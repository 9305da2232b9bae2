"""Human labels through MLflow's review queues, on the real store of the tiny project: queue a version's
item traces, score them as the UI does (HUMAN feedback), pull them into the label file, and compare's
prediction-powered Δ from them against a hand computation. The sample rule against hand-counted quotas."""

from __future__ import annotations

import json

import mlflow
import pytest
from mlflow.entities import AssessmentSource, AssessmentSourceType

from ragtrack.errors import RagtrackError
from ragtrack.evaluation.ppi import MIN_LABELLED
from ragtrack.evaluation.review_sample import stratified_sample

from .test_human_labels import run

TYPES = [("a1", "A"), ("a2", "A"), ("a3", "A"), ("a4", "A"), ("a5", "A"), ("a6", "A"), ("b1", "B"), ("b2", "B")]


def test_the_sample_is_split_over_types_in_proportion_and_keeps_every_type():
    # 8 items, A 6 and B 2. Size 4: quotas 3 and 1. Size 3: 2.25 and 0.75 → 2 and 1 (B's remainder is larger).
    for size, want in ((4, {"A": 3, "B": 1}), (3, {"A": 2, "B": 1}), (1, {"A": 1, "B": 0}), (8, {"A": 6, "B": 2})):
        picked = stratified_sample(TYPES, size)
        kinds = dict(TYPES)
        assert {k: sum(kinds[i] == k for i in picked) for k in "AB"} == want, size
    # The same seed picks the same items; a larger sample keeps the smaller one's.
    assert stratified_sample(TYPES, 3) == stratified_sample(list(reversed(TYPES)), 3)
    small, large = set(stratified_sample(TYPES, 3)), set(stratified_sample(TYPES, 6))
    assert small <= large
    # Five types, size 4: one type goes without (the one with the smallest remainder after a tie: by name).
    five = [("a1", "A"), ("a2", "A"), ("b1", "B"), ("c1", "C"), ("d1", "D")]
    assert sorted(dict(five)[i] for i in stratified_sample(five, 4)) == ["A", "B", "C", "D"]
    with pytest.raises(ValueError):
        stratified_sample(TYPES, 0)


def test_every_rubric_fits_a_label_schemas_instruction():
    from ragtrack.evaluation.judges import JUDGES, reviewer_rubric

    for language, heading in (("en", "## Rubric"), ("zh", "## 评分标准")):
        for judge in JUDGES.names():
            rubric = reviewer_rubric(judge, language)
            assert heading in rubric and "5" in rubric.split(heading)[1] and len(rubric) <= 1000, (language, judge)
            assert "Output format" not in rubric and "输出格式" not in rubric


def human(trace_id: str, metric: str, value, reviewer: str = "alice", kind=AssessmentSourceType.HUMAN) -> None:
    """A score as the review queue's UI writes it: a feedback named as the schema, source HUMAN."""
    mlflow.log_feedback(trace_id=trace_id, name=f"human/{metric}", value=value, source=AssessmentSource(kind, reviewer))


def test_a_review_queue_labelled_as_the_ui_does_reaches_compares_prediction_powered_delta(project):
    """About 100 s on a loaded 2-core machine: two evals of the tiny project (the embedder and both
    indexes built) are what a review queue is over; everything after them takes seconds."""
    from mlflow import MlflowClient
    from mlflow.genai import label_schemas, review_queues

    from ragtrack.api import pull_labels, queue_labels
    from ragtrack.evaluation.human_labels import load_labels
    from ragtrack.evaluation.judges import reviewer_rubric
    from ragtrack.tracking.store import Tag

    for version in ("v1", "v2"):
        assert run("--root", str(project), "eval", version).exit_code == 0
    queued = {v: queue_labels(v, root=project, size=4) for v in ("v1", "v2")}
    q1 = queued["v1"]
    assert q1.sampled == {"A": 1, "B": 1, "C": 1, "D": 1} and q1.items == 4 and q1.language == "en"
    assert q1.metrics == ["correctness", "groundedness", "relevance", "organization"]
    client = MlflowClient()
    experiment = client.get_run(q1.run_id).info.experiment_id
    schemas = {s.name: s for s in label_schemas.list_label_schemas(experiment)}
    # Made once, shared by both queues (beside MLflow's own default "Feedback" schema).
    assert {n for n in schemas if n.startswith("human/")} == {f"human/{m}" for m in q1.metrics}
    correctness = schemas["human/correctness"]
    assert correctness.instruction == reviewer_rubric("correctness", "en") and "## Rubric" in correctness.instruction
    assert (correctness.input.min_value, correctness.input.max_value) == (1, 5)
    again = queue_labels("v1", root=project, size=4)  # run again: the same queue, nothing added twice
    assert (again.queue_id, again.items) == (q1.queue_id, 4)

    # Each queued trace shows the question, the contexts with their passage IDs, the GT passages and answer.
    traces = {}
    for version, report in queued.items():
        for item in review_queues.list_review_queue_items(report.queue_id):
            trace = client.get_trace(item.item_id)
            traces[(version, trace.info.tags[Tag.ITEM_ID])] = trace
    golden = {json.loads(line)["id"]: json.loads(line) for line in (project / "golden/golden.jsonl").open()}
    items = sorted(stratified_sample([(i, g["type"]) for i, g in golden.items()], 4))
    assert len(traces) == 8 and {i for _, i in traces} == set(items)
    for (_, item), trace in traces.items():
        root = next(s for s in trace.data.spans if s.parent_id is None)
        assert root.inputs["question"] == golden[item]["question"]
        expected = {a.name: a.expectation.value for a in trace.info.assessments if a.expectation is not None}
        assert expected == {
            "expected_response": golden[item]["gt_answer"],
            "expected_passage_ids": golden[item]["gt_context_ids"],
        }
        retriever = next(s for s in trace.data.spans if s.span_type == "RETRIEVER")
        assert all(doc["metadata"]["passage_ids"] for doc in retriever.outputs)

    with pytest.raises(RagtrackError, match="no HUMAN scores"):  # nothing labelled yet: no empty file written
        pull_labels(root=project)
    assert not (project / "golden/labels/human-labels.jsonl").exists()

    # Scores as the UI writes them: two items on both versions (PPI needs two), bob changing his mind on one,
    # a judge's feedback under the same name and a score out of range, which the pull must not take.
    trace_of = {key: t.info.trace_id for key, t in traces.items()}
    given = {("v1", items[0]): 2, ("v1", items[1]): 4, ("v2", items[0]): 5, ("v2", items[1]): 3}
    for (version, item), value in given.items():
        human(trace_of[(version, item)], "correctness", value)
    human(trace_of[("v2", items[1])], "correctness", 4, reviewer="bob")  # later: overrides alice's 3
    given[("v2", items[1])] = 4
    human(trace_of[("v1", items[2])], "correctness", 1, kind=AssessmentSourceType.LLM_JUDGE)
    human(trace_of[("v1", items[3])], "correctness", 7)
    pulled = pull_labels(root=project)
    assert pulled.labelled == {"v1": 2, "v2": 2} and pulled.scores == 4 and pulled.kept == 0
    assert len(pulled.skipped) == 1 and "7 is not a score 1–5" in pulled.skipped[0]
    file = load_labels(project / "golden/labels/human-labels.jsonl")
    got = {(lab.version, lab.id): lab for lab in file.labels}
    assert {k: lab.labels for k, lab in got.items()} == {k: {"correctness": v} for k, v in given.items()}
    assert got[("v2", items[1])].reviewer == "bob"  # the newest score of a trace's metric is the label
    assert got[("v1", items[0])].reviewer == "alice" and got[("v1", items[0])].labelled_at.endswith("+00:00")

    compared = json.loads(run("--root", str(project), "compare", "v1", "v2", "--json", "-").stdout)
    assert compared["ppi"]["labelled"] == {"v1": 2, "v2": 2}
    figure = next(f for f in compared["ppi"]["metrics"] if f["metric"] == "correctness")
    # The pulled labels reach compare; two items labelled on both sides are below the minimum a
    # prediction-powered interval takes (MIN_LABELLED), which the figure says instead of an interval.
    assert figure["ppi"] is None and f"needs {MIN_LABELLED}" in figure["reason"], figure


def test_judge_align_reads_a_pulled_label_file_one_case_per_versions_answer(tmp_path):
    from ragtrack.api.judging import _cases_or_labels

    from .test_human_labels import label, write

    rows = [label("v1", "A01", 2, reviewer="alice"), label("v5", "A01", 4, labelled_at="2026-12-07T06:00:00+00:00")]
    cases = _cases_or_labels(write(tmp_path / "labels.jsonl", rows))
    assert [(c.id, c.labels) for c in cases] == [("v1/A01", {"correctness": 2}), ("v5/A01", {"correctness": 4})]
    calibration = {k: v for k, v in rows[0].items() if k not in ("version", "reviewer")}
    assert [c.id for c in _cases_or_labels(write(tmp_path / "cases.jsonl", [calibration]))] == ["A01"]
