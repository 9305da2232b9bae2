"""Traces built with MLflow's tracing API, written to the store in batches by ragtrack itself.

ragtrack builds a trace after the fact (an eval item, a production message) with MLflow's own span
API, so MLflow fills in everything its UI reads: the trace name, the request and response previews,
the schema version, the assessments logged while the root span is active. What it does not use is
MLflow's exporter, which suits a live app and not a bulk write:

* it writes each span of a trace apart and then the trace, in three or more store transactions, the
  trace's last in MLflow's slow "the spans got there first" merge: 127 ms of CPU a production trace
  on SQLite, so a 10,000-message pull wrote for 11 minutes;
* it does so from a queue that drops, with a warning, what it is handed while full, and from ten
  threads that contend for SQLite's one write lock, losing a span write now and then.

:class:`TraceBatch` takes the finished traces of the roots started in its block from MLflow's span
processor, before its exporter sees them, and :meth:`TraceBatch.write` stores them with the two
calls the exporter itself makes: ``start_trace`` for each trace (its info, tags and assessments, in
one transaction), then one ``log_spans`` for all their spans (MLflow groups them by trace in one
transaction). 18 ms a production trace, measured on the same store. Spans of any other trace (an
app's own tracing, in another thread) go to MLflow's exporter as before.

A write either stores a trace or raises: the callers still read the traces back and write again
what the store did not keep whole (a process killed between the two calls leaves a trace without
its spans).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import TypeVar

from mlflow import MlflowClient
from mlflow.entities import LiveSpan, Trace
from mlflow.tracing.provider import _get_span_processor, _get_tracer
from mlflow.tracing.trace_manager import InMemoryTraceManager
from mlflow.tracing.utils import add_size_stats_to_trace_metadata
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

_swap = threading.Lock()  # one batch at a time swaps the processor's exporter

#: Traces written in one batch (held in memory whole until written): an eval's items, a pull's messages.
#: About 2 s of writing on a quiet machine, under the 10 s a command may stay silent on a loaded one.
BATCH = 100

T = TypeVar("T")


def batches(things: list[T]) -> Iterator[list[T]]:
    """``things`` in runs of :data:`BATCH`, in order."""
    for start in range(0, len(things), BATCH):
        yield things[start : start + BATCH]


class TraceBatch:
    """``with TraceBatch(client) as batch:`` — start roots, :meth:`own` them, end them; then
    :meth:`write` the finished traces (in the order their roots ended) through ``client``."""

    def __init__(self, client: MlflowClient):
        self.client = client
        self.finished: list[Trace] = []
        self._ours: set[int] = set()
        self._processor = None
        self._exporter: SpanExporter | None = None
        self._delegate = None

    def __enter__(self) -> TraceBatch:
        _swap.acquire()
        try:
            _get_tracer(__name__)  # MLflow sets its tracer provider up on first use: before its processor is read
            processor = _get_span_processor()  # None: tracing disabled, the roots are no-op spans
        except BaseException:  # not entered: __exit__ will not run to let the lock go
            _swap.release()
            raise
        if processor is not None and hasattr(processor, "span_exporter"):
            self._processor, self._exporter = processor, processor.span_exporter
            # MLflow's batch span processor, when on, hands ended spans to its exporter from a thread
            # of its own; for the block every span goes through the plain (synchronous) path instead.
            self._delegate = getattr(processor, "_batch_delegate", None)
            processor._batch_delegate = None
            processor.span_exporter = _Capture(self)
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self._processor is not None:
                self._processor.span_exporter = self._exporter
                self._processor._batch_delegate = self._delegate
        finally:
            _swap.release()

    def own(self, root: LiveSpan) -> None:
        """Keep ``root``'s trace for :meth:`write` (call it before any span of the trace ends)."""
        self._ours.add(root._span.context.trace_id)

    def write(self, experiment_id: str, traces: Sequence[Trace] | None = None) -> list[str]:
        """Store ``traces`` (default: every finished one, which are then forgotten); their IDs.

        Raises what the store raised (an ``MlflowException``: a locked SQLite file, a full disk):
        the traces before the failing call are stored, those after it are not."""
        if traces is None:
            traces, self.finished = self.finished, []
        if not traces:
            return []
        tracing = self.client._tracing_client
        for trace in traces:
            add_size_stats_to_trace_metadata(trace)  # the span count MLflow writes with every trace
            tracing.start_trace(trace.info)
        tracing.log_spans(experiment_id, [span for trace in traces for span in trace.data.spans])
        return [t.info.trace_id for t in traces]


class _Capture(SpanExporter):
    """The processor's exporter for a :class:`TraceBatch`'s block: the batch's traces are taken whole
    when their root ends; any other span goes on to MLflow's exporter."""

    def __init__(self, batch: TraceBatch):
        self.batch = batch

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        theirs = [s for s in spans if s.context.trace_id not in self.batch._ours]
        if theirs:
            self.batch._exporter.export(theirs)
        manager = InMemoryTraceManager.get_instance()
        for span in spans:
            if span.parent is None and span.context.trace_id in self.batch._ours:
                self.batch._ours.discard(span.context.trace_id)
                if (done := manager.pop_trace(span.context.trace_id)) is not None:
                    self.batch.finished.append(done.trace)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.batch._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.batch._exporter.force_flush(timeout_millis)
