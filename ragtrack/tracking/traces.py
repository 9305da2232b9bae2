"""One trace per golden item: an eval run's items the way MLflow means evaluation records.

Each item becomes a trace of the run (and of the version's LoggedModel):

* a root span for the agent answering the question — its request names the
  item, its response is the answer — and under it a span for every stage the
  agent reported, with the stage's real start and end: ``rewrite``,
  ``retrieve`` (a RETRIEVER span whose outputs are the returned units in
  MLflow's document shape, their canonical passage IDs in the metadata),
  ``rerank``, ``generate``; an agent that reports no stages is one span;
* the item ID and question type as trace tags (searchable:
  ``tags.`ragtrack.item_id` = 'A03'``);
* each judge's verdict as numeric feedback ``judge/<judge>`` (1–5) with the
  judge's reason as its rationale, and the per-item retrieval metrics as
  feedback ``retrieval/<metric>`` saying which GT passages were found and missed;
* the GT answer and GT passage IDs as expectations.

MLflow's evaluation view of the run then shows a numeric mean per judge and a
readable row per item. (Feedback names carry a ``judge/`` prefix because the UI
treats a bare ``correctness`` or ``groundedness`` as its own pass/fail judges.)

Logging is idempotent by item ID: a resumed run logs traces only for the items
that have none yet.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import mlflow
from mlflow.entities import (
    Assessment,
    AssessmentError,
    AssessmentSource,
    AssessmentSourceType,
    Document,
    Expectation,
    Feedback,
    SpanStatusCode,
    SpanType,
    Trace,
    TraceInfo,
)
from mlflow.entities.span import NO_OP_SPAN_TRACE_ID
from mlflow.exceptions import MlflowException
from mlflow.tracing.constant import TraceMetadataKey
from mlflow.tracing.provider import safe_set_span_in_context

from ragtrack.agent import STAGE_KINDS
from ragtrack.errors import StoreError
from ragtrack.evaluation.judges import HEURISTIC
from ragtrack.records import ContextRecord, ItemRecord, RunSummary, StageRecord
from ragtrack.tracking.export_failures import cause
from ragtrack.tracking.store import Store, Tag
from ragtrack.tracking.trace_writer import TraceBatch, batches

log = logging.getLogger(__name__)

#: Expectation names: MLflow's own for the reference answer, ragtrack's for the GT passages.
EXPECTED_ANSWER = "expected_response"
EXPECTED_PASSAGES = "expected_passage_ids"


def judge_feedback(judge: str) -> str:
    """``judge/correctness``: the feedback name of a judge's verdicts."""
    return f"judge/{judge}"


def retrieval_feedback(item_key: str) -> str:
    """``retrieval/context_recall``: the feedback name of a per-item retrieval metric."""
    return f"retrieval/{item_key}"


def log_traces(store: Store, run: RunSummary, model_id: str | None, records: list[ItemRecord], judge: str) -> int:
    """A trace for every record of ``run`` that has no complete one yet; returns how many were logged.

    ``judge`` is the run's ``judge`` param: the heuristics (code) or an LLM judge.
    """
    done = _settle(store, run.run_id, records)
    source = AssessmentSource(
        AssessmentSourceType.CODE if judge == HEURISTIC else AssessmentSourceType.LLM_JUDGE, run.judge_identity
    )
    wrote: list[str] = []
    said: list[str] = []  # what the store said when a write failed
    for batch in batches([r for r in records if r.id not in done]):
        with TraceBatch(store.client) as traces:
            wrote += [r.id for r in batch if _trace(store, run, model_id, r, source, traces)]
        try:
            traces.write(store.experiment_id)
        except MlflowException as e:  # the read-back below finds what was stored before it failed
            said.append(str(e.message))
            break
    if wrote:
        # A run missing traces must not be closed as complete: left unfinished, the same command logs
        # them again.
        kept = item_traces(store, run.run_id)
        if lost := [i for i in wrote if i not in kept]:
            raise StoreError(
                f"the tracking store kept no trace of {len(lost)} of {len(wrote)} items ({', '.join(lost[:5])}"
                f"{', …' if len(lost) > 5 else ''}): {cause(said)}; "
                "the run is left unfinished: fix the store, then run the same command again to finish it"
            )
    return len(wrote)


def item_traces(store: Store, run_id: str) -> dict[str, list[TraceInfo]]:
    """The traces of ``run_id`` by item ID (several for one item only after an interrupted write)."""
    found: dict[str, list[TraceInfo]] = {}
    for trace in run_traces(store, run_id, spans=False):
        if item := trace.info.tags.get(Tag.ITEM_ID):
            found.setdefault(item, []).append(trace.info)
    return found


def run_traces(store: Store, run_id: str, *, spans: bool) -> Iterator[Trace]:
    """Every trace of ``run_id``; with ``spans``, only those whose span data could be read whole."""
    token = None
    while True:
        page = store.client.search_traces(
            locations=[store.experiment_id], run_id=run_id, include_spans=spans, max_results=500, page_token=token
        )
        yield from page
        token = page.token
        if not token:
            return


def _settle(store: Store, run_id: str, records: list[ItemRecord]) -> set[str]:
    """The items that have a complete trace of their current record; any other trace of an item is
    deleted, to be logged again.

    A trace and its assessments are written together, but its spans may reach the store first:
    a process killed in between leaves a trace without its assessments, and that item is traced
    again, not left half-told. (Traces logged before assessments rode with them have them
    written after the trace, the first judge's feedback last: the same test holds.) An item
    asked again when the eval resumed (its agent call or a judge had failed) has a new record:
    the trace of the old one names another digest.
    """
    last = {r.id: _last_assessment(r) for r in records}
    digests = {r.id: r.digest for r in records}
    done: dict[str, str] = {}  # item → its complete trace
    stale: list[str] = []
    for item, infos in item_traces(store, run_id).items():
        for info in infos:
            names = {a.name for a in info.assessments or ()}
            shown = info.tags.get(Tag.RECORD, digests.get(item))  # untagged: from before digests were tagged
            if item in last and item not in done and last[item] in names and shown == digests[item]:
                done[item] = info.trace_id
            else:
                stale.append(info.trace_id)
    if done:
        # Killed while its spans were being written, a trace keeps its assessments but lacks spans,
        # and MLflow cannot open it: complete means every span is there too.
        spans = {t.info.trace_id: len(t.data.spans) for t in run_traces(store, run_id, spans=True)}
        expected = {r.id: 1 + len(_child_stages(r)) for r in records}
        for item, trace_id in list(done.items()):
            if spans.get(trace_id) != expected[item]:
                stale.append(done.pop(item))
    if stale:
        store.client.delete_traces(store.experiment_id, trace_ids=stale)
    return set(done)


def _last_assessment(r: ItemRecord) -> str:
    """The name of the last of ``r``'s :func:`_assessments`: present means complete."""
    if r.judges:
        return judge_feedback(next(iter(r.judges)))
    logged = [key for key, value in r.retrieval.items() if value is not None]
    return retrieval_feedback(logged[0]) if logged else EXPECTED_PASSAGES


def _trace(
    store: Store, run: RunSummary, model_id: str | None, r: ItemRecord, judge: AssessmentSource, batch: TraceBatch
) -> bool:
    """Log the item's trace with its assessments; False when tracing is off or sampled out.

    The assessments are logged while the root span is the active one, so MLflow keeps them with
    the trace and stores them in the trace's own write: one write per item, where logging them
    afterwards took one store call (over HTTP, one request) per assessment."""
    stages = _child_stages(r)
    if r.stages and not stages:  # an agent that reports no stages: one span, the call's
        start, end = r.stages[0].start_ns, r.stages[0].end_ns
    elif stages:
        start, end = min(s.start_ns for s in stages), max(s.end_ns for s in stages)
    else:  # a record from before stages were kept: its duration is known, not its start
        end = time.time_ns()
        start = end - int(r.latency_s * 1e9)
    metadata = {TraceMetadataKey.SOURCE_RUN: run.run_id, **({TraceMetadataKey.MODEL_ID: model_id} if model_id else {})}
    root = mlflow.start_span_no_context(
        r.id,
        span_type=SpanType.AGENT,
        inputs={
            "item_id": r.id,
            "type": r.type,
            **({"history": r.history} if r.history else {}),
            "question": r.question,
        },
        attributes={"retrieved_passage_ids": r.retrieved_passage_ids, "gt_passage_ids": r.gt_context_ids},
        tags={Tag.ITEM_ID: r.id, Tag.ITEM_TYPE: r.type, Tag.VERSION: run.version, Tag.RECORD: r.digest},
        metadata=metadata,
        experiment_id=store.experiment_id,
        start_time_ns=start,
    )
    if not root.trace_id or root.trace_id == NO_OP_SPAN_TRACE_ID:
        log.warning("tracing is disabled or sampled out: item %s has no trace", r.id)
        return False
    batch.own(root)
    for stage in stages:
        stage_span(root, stage, set(r.gt_context_ids))
    if r.errors:
        root.set_status(SpanStatusCode.ERROR)
        root.set_attribute("errors", r.errors)
    with safe_set_span_in_context(root):  # MLflow's helper for making a span the active one
        for assessment in _assessments(r, judge):
            assessment.span_id = root.span_id
            mlflow.log_assessment(root.trace_id, assessment)
    root.end(outputs=r.answer, end_time_ns=end)
    return True


def _child_stages(r: ItemRecord) -> list[StageRecord]:
    """The stages traced as spans under the item's root span: none for an agent that reports no
    stages (its one ``agent`` stage is the root itself)."""
    return [] if len(r.stages) == 1 and r.stages[0].kind == "agent" else list(r.stages)


def stage_span(root, stage: StageRecord, gt: set[str] | None = None) -> None:
    """A stage as a span under ``root`` (``gt``: the item's GT passages, marked in the documents);
    :func:`stage_of` reads it back."""
    kind = STAGE_KINDS.check(stage.kind).upper()  # the registered kinds are MLflow span types
    span = mlflow.start_span_no_context(
        stage.name, span_type=kind, parent_span=root, inputs=stage.inputs, start_time_ns=stage.start_ns
    )
    if stage.node:  # a workflow node: what the platform said of it, and a failed node shown as one
        span.set_attributes({f"node.{k}": v for k, v in stage.node.items() if v is not None})
        if stage.node.get("status") in ("failed", "exception"):
            span.set_status(SpanStatusCode.ERROR)
    if stage.contexts:
        # MLflow's retriever shape: a list of documents; what else the stage said goes to attributes.
        span.set_attributes(dict(stage.outputs))
        outputs = [retriever_document(c, rank, gt) for rank, c in enumerate(stage.contexts, start=1)]
    else:
        outputs = stage.outputs
    span.end(outputs=outputs, end_time_ns=stage.end_ns)


def stage_of(span) -> StageRecord | None:
    """A workflow node's :func:`stage_span` back as its stage (None: a span with no node attributes)."""
    attributes = span.attributes or {}
    node = {k.removeprefix("node."): v for k, v in attributes.items() if k.startswith("node.")}
    if not node:
        return None
    outputs = span.outputs
    contexts: list[ContextRecord] = []
    if isinstance(outputs, list):  # a retriever's documents; what else it said is in the attributes
        contexts = [context_of(d) for d in outputs if isinstance(d, dict)]
        outputs = {k: v for k, v in attributes.items() if not k.startswith(("node.", "mlflow."))}
    kind = str(span.span_type or "chain").lower()
    return StageRecord(
        span.name,
        kind if kind in STAGE_KINDS else "chain",
        span.start_time_ns or 0,
        span.end_time_ns or 0,
        span.inputs if isinstance(span.inputs, dict) else {},
        outputs if isinstance(outputs, dict) else {},
        contexts,
        node,
    )


def retriever_document(c: ContextRecord, rank: int, gt: set[str] | None = None) -> dict:
    """A retrieved context in MLflow's document shape, its canonical passages (and, for a golden item,
    which of them are GT) in the metadata; :func:`context_of` reads it back."""
    metadata = {  # the UI shows doc_uri beside each document: the canonical passages it covers
        "doc_uri": " + ".join(c.passage_ids) or c.unit_id,
        "rank": rank,
        "unit_id": c.unit_id,
        "passage_ids": c.passage_ids,
        **({"gt_passage_ids": [p for p in c.passage_ids if p in gt]} if gt is not None else {}),
        "score": c.score,
        "mapping": c.mapping,
    }
    return Document(page_content=c.text, metadata=metadata, id=c.unit_id).to_dict()


def context_of(document: dict) -> ContextRecord:
    """A :func:`retriever_document` back as the context it shows."""
    meta = document.get("metadata") or {}
    return ContextRecord(
        str(meta.get("unit_id") or document.get("id") or ""),
        str(document.get("page_content") or ""),
        [str(p) for p in meta.get("passage_ids") or []],
        meta.get("score"),
        str(meta.get("mapping") or "unmapped"),
    )


def _assessments(r: ItemRecord, judge: AssessmentSource) -> list[Assessment]:
    """Expectations, retrieval feedback, then the judges last to first (a trace lists its newest
    feedback first), each a millisecond after the one before: written at once, they keep that order."""
    golden = AssessmentSource(AssessmentSourceType.HUMAN, "golden set")
    out: list[Assessment] = [
        Expectation(EXPECTED_ANSWER, r.gt_answer, source=golden),
        Expectation(EXPECTED_PASSAGES, list(r.gt_context_ids), source=golden),
    ]
    code = AssessmentSource(AssessmentSourceType.CODE, "ragtrack")
    found = retrieval_rationale(r)
    for item_key, value in reversed(r.retrieval.items()):
        if value is not None:  # None: not defined for this item (all_hops_at_k without GT groups)
            out.append(Feedback(retrieval_feedback(item_key), value, rationale=found, source=code))
    for name, v in reversed(r.judges.items()):
        error = AssessmentError(error_code="JUDGE_ERROR", error_message=v.error) if v.score is None else None
        out.append(Feedback(judge_feedback(name), v.score, error=error, rationale=v.reason or None, source=judge))
    now = int(time.time() * 1000)
    for n, assessment in enumerate(out):
        assessment.create_time_ms = assessment.last_update_time_ms = now + n
    return out


def retrieval_rationale(r: ItemRecord) -> str:
    """Which GT passages the agent's contexts covered (and in which context) and which it missed."""
    where: dict[str, int] = {}
    for n, c in enumerate(r.contexts, start=1):
        for pid in c.passage_ids:
            where.setdefault(pid, n)
    found = [f"{pid} (context {where[pid]})" for pid in r.gt_context_ids if pid in where]
    missed = [pid for pid in r.gt_context_ids if pid not in where]
    text = f"{len(found)} of {len(r.gt_context_ids)} GT passages retrieved"
    if found:
        text += ": " + ", ".join(found)
    if missed:
        text += "; missed: " + ", ".join(missed)
    return text
