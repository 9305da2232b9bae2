"""Production messages as MLflow traces: one trace per answered question in ``<experiment>-production``.

Each pulled :class:`~ragtrack.production.messages.ProductionMessage` becomes a trace whose start is
the moment it was answered (so the UI's time filters and ``timestamp_ms`` searches mean production
time):

* a root span named for the app / version that served it — request ``{"question": …}``, response
  the answer — and under it a ``retrieve`` RETRIEVER span whose outputs are the app's contexts in
  MLflow's document shape, each with the canonical passage IDs it maps to (an empty list: the app
  reported no retrieval); a workflow app's nodes follow it, one span each, as an eval's trace shows them
  (:func:`~ragtrack.tracking.traces.stage_span`: role, status, outputs, a retrieval node's documents);
* tags naming the source, the app, the platform's message and conversation IDs, the hashed user,
  the time and what part of the traffic the pull could see (``Tag.PRODUCTION_*``), and MLflow's own
  user and session metadata (hashed user, conversation), which its UI groups by;
* the end user's rating as a HUMAN feedback assessment ``user_rating`` (``like`` / ``dislike``), the
  comment as its rationale. A rating changed since is an override of the old assessment (MLflow
  keeps the history); a rating withdrawn deletes it.

``(source, app, message ID)`` identifies a message: :meth:`ProductionLog.index` lists what is
stored, so a pull writes only what is new. A trace a killed process left without all its spans is
deleted there and written again.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
import mlflow
from mlflow import MlflowClient
from mlflow.entities import AssessmentSource, AssessmentSourceType, Feedback, SpanType, Trace, TraceInfo
from mlflow.entities.span import NO_OP_SPAN_TRACE_ID
from mlflow.exceptions import MlflowException
from mlflow.tracing.constant import TraceMetadataKey
from mlflow.tracing.provider import safe_set_span_in_context

from ragtrack.agents.endpoint import whole_body
from ragtrack.errors import StoreError
from ragtrack.llm.base import TransientError
from ragtrack.production.messages import ProductionMessage, epoch_ms, utc_iso
from ragtrack.secrets import without_credentials
from ragtrack.tracking.export_failures import cause
from ragtrack.tracking.store import Store, Tag, first_line, quoted, trace_id_filters
from ragtrack.tracking.trace_writer import TraceBatch
from ragtrack.tracking.traces import context_of, retriever_document, stage_of, stage_span

#: The experiment beside the eval experiment that holds production traces: ``<experiment>-production``.
PRODUCTION = "production"
#: The HUMAN feedback assessment holding an end user's rating.
RATING = "user_rating"
RETRIEVE_SPAN = "retrieve"
SPANS = 2  # a complete production trace: the root and its retrieve span, and a span per workflow node
NODE_SPANS = "node_spans"  # the root span's attribute: how many node spans the trace has
WRITE_ATTEMPTS = 3  # a message whose trace the store did not keep is written again, this many times in all
_SIZE_STATS = "mlflow.trace.sizeStats"  # MLflow's trace metadata: {"num_spans": …} once the trace is written


@dataclass(frozen=True)
class Stored:
    """What the store holds of one message: its trace and its current rating assessment."""

    trace_id: str
    rating: str | None
    comment: str | None
    assessment_id: str | None  # of the valid rating assessment (None: none, or not looked up yet)
    user: str | None = None  # hashed


class ProductionLog:
    """The production experiment of one project's store: write, index, re-rate and read messages."""

    def __init__(self, store: Store):
        self.store = store
        self.experiment_name = f"{store.experiment_name}-{PRODUCTION}"
        self.experiment_id = store.side_experiment(PRODUCTION)

    # ------------------------------------------------------------ reading
    def index(self, source: str, app: str) -> dict[str, Stored]:
        """Message ID → what is stored, for every complete trace of ``source``/``app`` (its spans read
        back). Incomplete traces (a killed write, a span write lost) and duplicates (two pulls racing)
        are deleted, so their messages count as new."""
        with _store_errors("read what is stored"):
            return self._index(source, app)

    def _index(self, source: str, app: str) -> dict[str, Stored]:
        found: dict[str, Stored] = {}
        stale: list[str] = []
        for trace in self._traces(_filter(source, app), spans=True):
            info = trace.info
            message = info.tags.get(Tag.PRODUCTION_MESSAGE)
            if message is None or message in found or not _whole(trace):
                stale.append(info.trace_id)
                continue
            current = _rating(info)
            found[message] = Stored(
                info.trace_id,
                str(current.value) if current else None,
                current.rationale if current else None,
                current.assessment_id if current else None,
                info.tags.get(Tag.PRODUCTION_USER),
            )
        if stale:
            self.store.client.delete_traces(self.experiment_id, trace_ids=stale)
        return found

    def read(
        self, *, source: str | None = None, app: str | None = None, since: str | None = None, until: str | None = None
    ) -> list[ProductionMessage]:
        """Stored messages, oldest first; ``since`` / ``until`` (ISO 8601) bound when they were answered
        (``since`` included, ``until`` excluded)."""
        clauses = [_filter(source, app)] if source or app else []
        if since:
            clauses.append(f"timestamp_ms >= {epoch_ms(utc_iso(since))}")
        if until:
            clauses.append(f"timestamp_ms < {epoch_ms(utc_iso(until))}")
        out = [
            message
            for trace in self._traces(" and ".join(c for c in clauses if c), spans=True)
            if (message := _message(trace)) is not None
        ]
        return sorted(out, key=lambda m: (m.created_at, m.source, m.app, m.message_id))

    def trace_infos(self, query: str = "") -> Iterator[TraceInfo]:
        """The trace infos (tags, assessments, no spans) of the production traces matching ``query``."""
        return self._infos(query)

    def _infos(self, query: str) -> Iterator[TraceInfo]:
        for trace in self._traces(query, spans=False):
            yield trace.info

    def _traces(self, query: str, *, spans: bool) -> Iterator[Trace]:
        return search(self.store.client, self.experiment_id, query, spans=spans)

    # ------------------------------------------------------------ writing
    def write(self, messages: list[ProductionMessage]) -> list[str]:
        """One trace per message, in the store before this returns; their trace IDs, in order.

        Written in one batch (:class:`~ragtrack.tracking.trace_writer.TraceBatch`: a trace's info and
        rating in one transaction each, all their spans in one more) and read back. A trace the store
        did not keep whole (a span write lost) is written again, up to :data:`WRITE_ATTEMPTS` times in
        all; a write the store refused (a locked SQLite file, a full disk) is not tried again. What is
        still missing then is an error naming why (the pull's cursor does not move past it). Give it a
        batch of a pull at a time (:func:`~ragtrack.tracking.trace_writer.batches`): it is held in memory whole."""
        with _store_errors("read back the production traces it wrote"):
            return self._write(messages)

    def _write(self, messages: list[ProductionMessage]) -> list[str]:
        ids: list[str | None] = [None] * len(messages)
        said: list[str] = []  # what the store said when it refused a write
        attempts = 0
        while attempts < WRITE_ATTEMPTS and not said and (todo := [n for n, t in enumerate(ids) if t is None]):
            attempts += 1
            with TraceBatch(self.store.client) as batch:
                built = {n: self._trace(messages[n], batch) for n in todo}
            try:
                batch.write(self.experiment_id)
            except MlflowException as e:  # what was stored before it failed is found by the read-back
                said.append(str(e.message))
            kept = self._complete(list(built.values()))
            for n, trace_id in built.items():
                ids[n] = trace_id if trace_id in kept else None
            if partial := [t for t in built.values() if t not in kept]:
                with contextlib.suppress(MlflowException):  # half-written ones, if any: written again
                    self.store.client.delete_traces(self.experiment_id, trace_ids=partial)
        if lost := sum(t is None for t in ids):
            raise StoreError(
                f"the tracking store kept no trace of {lost} of {len(messages)} production messages after "
                f"{attempts} attempt(s): {cause(said)}; pull again once the store is fixed "
                "(what was stored is kept)"
            )
        return [t for t in ids if t is not None]

    def _complete(self, trace_ids: list[str]) -> set[str]:
        """Which of ``trace_ids`` the store holds with all their spans, read back as :meth:`read` reads
        them (the trace's own span count is written apart from the spans: a span write lost to SQLite's
        lock left a trace that said 2 spans and had 1)."""
        kept: set[str] = set()
        for listed in trace_id_filters(trace_ids):
            kept.update(t.info.trace_id for t in self._traces(listed, spans=True) if _whole(t))
        return kept

    def _trace(self, m: ProductionMessage, batch: TraceBatch) -> str:
        start = epoch_ms(m.created_at) * 1_000_000
        tags = {
            Tag.PRODUCTION_SOURCE: m.source,
            Tag.PRODUCTION_APP: m.app,
            Tag.PRODUCTION_MESSAGE: m.message_id,
            Tag.PRODUCTION_CREATED: m.created_at,
            Tag.PRODUCTION_COVERAGE: m.coverage,
            **({Tag.PRODUCTION_USER: m.user} if m.user else {}),
            **({Tag.PRODUCTION_CONVERSATION: m.conversation_id} if m.conversation_id else {}),
        }
        metadata = {
            **({TraceMetadataKey.TRACE_USER: m.user} if m.user else {}),
            **({TraceMetadataKey.TRACE_SESSION: m.conversation_id} if m.conversation_id else {}),
        }
        passages = list(dict.fromkeys(p for c in m.contexts for p in c.passage_ids))
        root = mlflow.start_span_no_context(
            m.app,
            span_type=SpanType.AGENT,
            inputs={"question": m.question},
            attributes={"message_id": m.message_id, "retrieved_passage_ids": passages, NODE_SPANS: len(m.stages)},
            tags=tags,
            metadata=metadata,
            experiment_id=self.experiment_id,
            start_time_ns=start,
        )
        if not root.trace_id or root.trace_id == NO_OP_SPAN_TRACE_ID:  # a pull without traces stores nothing
            raise StoreError(
                "MLflow tracing is disabled or sampled out in this process (MLFLOW_TRACE_SAMPLING_RATIO, "
                "mlflow.tracing.disable()): production messages are stored as traces; enable it and pull again"
            )
        batch.own(root)
        span = mlflow.start_span_no_context(
            RETRIEVE_SPAN,
            span_type=SpanType.RETRIEVER,
            parent_span=root,
            inputs={"query": m.question},
            start_time_ns=start,
        )
        span.end(outputs=[retriever_document(c, n) for n, c in enumerate(m.contexts, start=1)], end_time_ns=start)
        for stage in m.stages:
            stage_span(root, stage)
        if m.rating:
            source = AssessmentSource(AssessmentSourceType.HUMAN, m.user or "end user")
            with safe_set_span_in_context(root):  # written with the trace, in one store call (see traces.py)
                mlflow.log_assessment(root.trace_id, _feedback(m.rating, m.comment, m.rated_at, source))
        root.end(outputs=m.answer, end_time_ns=max([start, *(s.end_ns for s in m.stages)]))
        return root.trace_id

    def rate(self, stored: Stored, rating: str | None, comment: str | None, rated_at: str | None) -> Stored:
        """Bring a stored message's rating assessment to ``rating`` (with the user's ``comment``): added,
        overridden (MLflow keeps the old one as history) or, when the rating was withdrawn, deleted."""
        with _store_errors("re-rate a stored message"):
            return self._rate(stored, rating, comment, rated_at)

    def _rate(self, stored: Stored, rating: str | None, comment: str | None, rated_at: str | None) -> Stored:
        current = stored.assessment_id
        if current is None and stored.rating is not None:  # written by this process: look its ID up
            found = _rating(mlflow.get_trace(stored.trace_id).info)
            current = found.assessment_id if found else None
        if rating is None:
            if current:
                mlflow.delete_assessment(stored.trace_id, current)
            return Stored(stored.trace_id, None, None, None, stored.user)
        source = AssessmentSource(AssessmentSourceType.HUMAN, stored.user or "end user")
        if current is None:
            made = mlflow.log_assessment(stored.trace_id, _feedback(rating, comment, rated_at, source))
        else:
            made = mlflow.override_feedback(
                trace_id=stored.trace_id,
                assessment_id=current,
                value=rating,
                rationale=comment,
                source=source,
                metadata=_rated_at(rated_at),
            )
        return Stored(stored.trace_id, rating, comment, made.assessment_id, stored.user)


def read_messages(
    store: Store,
    *,
    source: str | None = None,
    app: str | None = None,
    since: str | None = None,
    until: str | None = None,
) -> list[ProductionMessage]:
    """The production messages a project's store holds, oldest first, each with its ``trace_id`` (to
    write assessments on): optionally of one source, one app / version, and answered in
    ``[since, until)`` (ISO 8601 dates or times, UTC unless they say otherwise)."""
    return ProductionLog(store).read(source=source, app=app, since=since, until=until)


def search(client: MlflowClient, experiment_id: str, query: str = "", *, spans: bool) -> Iterator[Trace]:
    """Every trace of an experiment matching ``query``, oldest first, page by page (a server handing
    back a page token it gave before would be paged forever: that stops with an error)."""
    token = None
    tokens: set[str] = set()
    while True:
        page = client.search_traces(
            locations=[experiment_id],
            filter_string=query or None,
            include_spans=spans,
            order_by=["timestamp_ms ASC"],
            max_results=500,
            page_token=token,
        )
        yield from page
        token = page.token
        if not token:
            return
        if token in tokens:
            raise StoreError(f"the tracking store repeats a page of traces (page token {token[:40]!r}); stopped")
        tokens.add(token)


class TraceExperiment:
    """An experiment of an app's own traces, perhaps on another store (``logs pull --from mlflow``)."""

    USER = TraceMetadataKey.TRACE_USER  # MLflow's trace metadata: the end user, and the conversation
    SESSION = TraceMetadataKey.TRACE_SESSION

    def __init__(self, tracking_uri: str, experiment: str):
        """``experiment``: a name or an ID."""
        where = without_credentials(tracking_uri)
        _answers(tracking_uri, where)
        self.client = MlflowClient(tracking_uri)
        try:
            found = self.client.get_experiment_by_name(experiment)
            if found is None and experiment.isdigit():
                found = self.client.get_experiment(experiment)
        except MlflowException as e:
            raise StoreError(f"the tracking store {where}: {first_line(e.message)}") from None
        if found is None:
            raise StoreError(f"no experiment {experiment!r} in {where} (pass its name or ID)")
        self.experiment_id, self.name = found.experiment_id, found.name

    def traces(self, query: str = "", *, spans: bool) -> Iterator[Trace]:
        return search(self.client, self.experiment_id, query, spans=spans)

    @staticmethod
    def session_is(conversation: str) -> str:
        """A search filter: the traces of one conversation."""
        return f"metadata.`{TraceExperiment.SESSION}` = {quoted(conversation)}"


@contextmanager
def _store_errors(doing: str) -> Iterator[None]:
    """A store call's failure as one line saying why (a locked SQLite file, a full disk), not a traceback."""
    try:
        yield
    except MlflowException as e:
        raise StoreError(f"the tracking store could not {doing}: {cause([str(e.message)])}") from None


#: The most a tracking server (``--source-uri``) may take to answer at all: MLflow's own client waits
#: 120 s a request and retries seven times, so a silent server held a pull past 200 s.
ANSWER_WITHIN_S = 10.0


def _answers(tracking_uri: str, where: str) -> None:
    """A tracking server answers (anything, within :data:`ANSWER_WITHIN_S`), else one error; not a server: nothing."""
    if urlsplit(tracking_uri).scheme not in ("http", "https"):
        return
    try:
        with (
            httpx.Client(timeout=ANSWER_WITHIN_S) as client,
            client.stream("GET", tracking_uri.rstrip("/") + "/health") as reply,
        ):
            whole_body(reply, time.monotonic() + ANSWER_WITHIN_S, ANSWER_WITHIN_S)
    except httpx.TimeoutException:
        raise StoreError(
            f"the tracking server {where} sent no reply within {ANSWER_WITHIN_S:g} s (GET /health); is it up?"
        ) from None
    except (httpx.HTTPError, TransientError) as e:
        raise StoreError(f"the tracking server {where} did not answer GET /health: {e}; is it up?") from None


def _filter(source: str | None, app: str | None) -> str:
    clauses = [
        f"tags.`{tag}` = {quoted(value)}"
        for tag, value in ((Tag.PRODUCTION_SOURCE, source), (Tag.PRODUCTION_APP, app))
        if value
    ]
    return " and ".join(clauses)


def _whole(trace: Trace) -> bool:
    """A trace with every span it should have, as the store gives them back (not only as it counts them)."""
    message = _message(trace)
    if message is None:
        return False
    expected = SPANS + len(message.stages)
    return _span_count(trace.info) == expected == len(trace.data.spans)


def _span_count(info: TraceInfo) -> int:
    try:
        return int(json.loads(info.trace_metadata.get(_SIZE_STATS, "{}")).get("num_spans", 0))
    except (ValueError, TypeError, AttributeError):
        return 0


def _rating(info: TraceInfo):
    """The valid (not overridden) rating assessment of a trace, or None."""
    return next((a for a in info.assessments or () if a.name == RATING and a.valid is not False), None)


def _rated_at(rated_at: str | None) -> dict[str, str] | None:
    return {"rated_at": rated_at} if rated_at else None


def _feedback(rating: str, comment: str | None, rated_at: str | None, source: AssessmentSource) -> Feedback:
    feedback = Feedback(RATING, rating, rationale=comment, source=source, metadata=_rated_at(rated_at))
    if rated_at:
        feedback.create_time_ms = feedback.last_update_time_ms = epoch_ms(rated_at)
    return feedback


def _message(trace: Trace) -> ProductionMessage | None:
    """A stored trace back as the message it shows; None for one without all its spans (a killed write)."""
    info, spans = trace.info, trace.data.spans
    tags = info.tags
    root = next((s for s in spans if s.parent_id is None), None)
    retrieve = next(
        (s for s in spans if s.name == RETRIEVE_SPAN and s.parent_id is not None and stage_of(s) is None), None
    )
    if root is None or retrieve is None or Tag.PRODUCTION_MESSAGE not in tags:
        return None
    inputs = root.inputs if isinstance(root.inputs, dict) else {}
    found = [stage for s in spans if s.parent_id == root.span_id and (stage := stage_of(s)) is not None]
    stages = sorted(found, key=lambda s: (s.node.get("index") or 0, s.start_ns))
    if len(stages) != (root.attributes or {}).get(NODE_SPANS, 0):
        return None  # a node span lost on the way
    current = _rating(info)
    rated_at = (current.metadata or {}).get("rated_at") if current else None
    return ProductionMessage(
        message_id=tags[Tag.PRODUCTION_MESSAGE],
        source=tags.get(Tag.PRODUCTION_SOURCE, ""),
        app=tags.get(Tag.PRODUCTION_APP, ""),
        question=str(inputs.get("question") or ""),
        answer=root.outputs if isinstance(root.outputs, str) else json.dumps(root.outputs, ensure_ascii=False),
        created_at=tags.get(Tag.PRODUCTION_CREATED) or utc_iso(info.request_time / 1000),
        contexts=[context_of(d) for d in retrieve.outputs or [] if isinstance(d, dict)],
        conversation_id=tags.get(Tag.PRODUCTION_CONVERSATION),
        user=tags.get(Tag.PRODUCTION_USER),
        rating=str(current.value) if current else None,  # type: ignore[arg-type]
        comment=current.rationale if current else None,
        rated_at=rated_at,
        coverage=tags.get(Tag.PRODUCTION_COVERAGE, "all"),  # type: ignore[arg-type]
        trace_id=info.trace_id,
        stages=stages,
    )
