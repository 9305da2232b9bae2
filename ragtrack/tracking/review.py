"""MLflow review queues: where people score versions' answers beside the trace they judge.

A label schema per judged metric (``human/<metric>``: 1–5, the judge's rubric as its instruction)
and a review queue of item traces; a reviewer's answer is a HUMAN ``Feedback`` on the trace, named
as the schema. :func:`human_scores` reads them back: the store is where labels live, the label
file (:mod:`ragtrack.evaluation.human_labels`) their export.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlflow.entities import AssessmentSourceType
from mlflow.genai import label_schemas, review_queues
from mlflow.tracing.constant import TraceMetadataKey

from ragtrack.tracking.store import Store, Tag

#: The prefix of the schema (and so the HUMAN feedback) names: ``human/correctness``.
PREFIX = "human/"


def human_feedback(metric: str) -> str:
    """``human/correctness``: the label schema of a judged metric, and the name of a reviewer's answer."""
    return f"{PREFIX}{metric}"


def label_schemas_for(store: Store, rubrics: dict[str, str]) -> list[str]:
    """A 1–5 feedback schema per metric (``rubrics``: metric → the judge's rubric), made where missing;
    their IDs, in ``rubrics``' order. An existing schema is kept as it is (a reviewer may be using it)."""
    existing = {s.name: s.schema_id for s in _all_schemas(store)}
    ids = []
    for metric, rubric in rubrics.items():
        name = human_feedback(metric)
        if name not in existing:
            schema = label_schemas.create_label_schema(
                name,
                type="feedback",
                input=label_schemas.InputNumeric(min_value=1, max_value=5),
                instruction=rubric,
                enable_comment=True,
                experiment_id=store.experiment_id,
            )
            existing[name] = schema.schema_id
        ids.append(existing[name])
    return ids


def _all_schemas(store: Store) -> list:
    found, token = [], None
    while True:
        page = label_schemas.list_label_schemas(store.experiment_id, max_results=100, page_token=token)
        found += list(page)
        if not (token := page.token):
            return found


def review_queue(store: Store, name: str, schema_ids: list[str], trace_ids: list[str]) -> tuple[str, int]:
    """The custom queue ``name`` (made when missing) with ``trace_ids`` attached (re-attaching keeps an
    item's status): its ID and how many items it holds."""
    queue = next((q for q in _all_queues(store) if q.name == name), None)
    if queue is None:
        queue = review_queues.create_review_queue(
            name, queue_type="custom", schema_ids=schema_ids, experiment_id=store.experiment_id
        )
    review_queues.add_items_to_review_queue(queue.queue_id, item_ids=trace_ids)
    return queue.queue_id, len(_queue_items(queue.queue_id))


def _all_queues(store: Store) -> list:
    found, token = [], None
    while True:
        page = review_queues.list_review_queues(experiment_id=store.experiment_id, page_token=token)
        found += list(page)
        if not (token := page.token):
            return found


@dataclass(frozen=True)
class HumanScore:
    """One reviewer's score of one metric on one item trace of an eval run."""

    version: str
    run_id: str
    item_id: str
    metric: str
    value: object  # as stored: the caller checks it is 1–5
    reviewer: str  # the assessment's source ID, as MLflow gives it
    time_ms: int
    trace_id: str


def human_scores(store: Store) -> list[HumanScore]:
    """Every HUMAN feedback named ``human/<metric>`` on the ragtrack item traces of the experiment's
    review queues; the newest per (trace, metric): a reviewer who changed their mind overrides the
    score (MLflow keeps the old one, marked invalid, or beside it)."""
    trace_ids = dict.fromkeys(item.item_id for queue in _all_queues(store) for item in _queue_items(queue.queue_id))
    newest: dict[tuple[str, str], HumanScore] = {}
    for trace_id in trace_ids:
        info = store.client.get_trace(trace_id).info
        item, version = info.tags.get(Tag.ITEM_ID), info.tags.get(Tag.VERSION)
        run_id = info.trace_metadata.get(TraceMetadataKey.SOURCE_RUN)
        if not (item and version and run_id):  # a trace of something else, queued by hand
            continue
        for a in info.assessments or ():
            if not a.name.startswith(PREFIX) or a.source.source_type != AssessmentSourceType.HUMAN:
                continue
            if a.valid is False or a.feedback is None:
                continue
            score = HumanScore(
                version,
                run_id,
                item,
                a.name[len(PREFIX) :],
                a.feedback.value,
                a.source.source_id,
                a.last_update_time_ms or a.create_time_ms or 0,
                trace_id,
            )
            key = (trace_id, score.metric)
            if key not in newest or newest[key].time_ms <= score.time_ms:
                newest[key] = score
    return list(newest.values())


def _queue_items(queue_id: str) -> list:
    found, token = [], None
    while True:
        page = review_queues.list_review_queue_items(queue_id, page_token=token)
        found += list(page)
        if not (token := page.token):
            return found
