"""``--from mlflow EXPERIMENT``: the whole traffic an app traced into MLflow, rated or not.

Two shapes are recognised, trace by trace:

* **Dify's MLflow tracing provider** (see :mod:`ragtrack.testing.dify_traces` for the shape): a
  chatbot app's ``message`` trace (question: the last user prompt message, answer: its outputs) is
  joined to the ``dataset_retrieval`` trace with the same ``message_id`` attribute (its documents are
  the contexts); a workflow or chatflow app's ``workflow`` trace holds the query and the answer in its
  root span, and a span per node under it (see below). A chatbot message keeps
  Dify's message ID; a workflow run, having none, its ``workflow_run_id``. With ``--version`` naming
  the app's Dify spec, the ratings of ``/app/feedbacks`` are joined by message ID (a chatflow run:
  through the conversation's ``/messages``, by question and time). A HUMAN feedback someone gave a
  Dify trace in MLflow (a reviewer's thumbs; a workflow app's runs have no end-user rating in Dify)
  rates the message the trace holds.
* **Your own app's traces**: the question from the root span's inputs (``question``, ``query``,
  ``input``… or the last user message), the answer from its outputs, the contexts from its RETRIEVER
  spans' documents, and the rating from the trace's HUMAN feedback assessments (a boolean, or
  like/dislike, thumbs up/down); the trace's own ID identifies the message.

A workflow trace's node spans become the message's nodes, as the eval reads a streamed run's
``node_finished`` events (:mod:`ragtrack.agents.workflow`), so the same node metrics read both. Dify's
provider names a node's span by its title, in the order the nodes ran, with attributes ``node_id``,
``node_type`` and ``status`` (a node that did not succeed is an ERROR span with an ``exception`` event
saying its status): an LLM or question-classifier node is an LLM span (inputs the prompt messages,
usage in ``usage``; an LLM node's outputs its text alone, a classifier's ``class_name``), a
knowledge-retrieval node a RETRIEVER span whose outputs are MLflow documents with the result's
metadata (an empty result stays ``{"result": []}``), any other node a CHAIN (or TOOL) span with the
node's own inputs and outputs. The contexts of the message are then those of the retrieval nodes that
ran. A node span that cannot be read (no ``node_type``, outputs of no known shape) is left out and
counted by reason; the rest of the run is kept.

End user and conversation come from MLflow's trace metadata (``mlflow.trace.user``,
``mlflow.trace.session``), where Dify puts them too. Traces are read from the cursor's time on
(with a margin for traces that reached the store late); ratings are read again from every trace's
assessments, and from ``/app/feedbacks``, on every pull. Other Dify traces (tools, moderation,
suggested questions, conversation names) are not answered questions and are skipped.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ragtrack.agents.base import number
from ragtrack.agents.dify import dify_check
from ragtrack.agents.mapping import PlatformContext
from ragtrack.agents.workflow import FAILED, RETRIEVAL, Node, assign_roles, node_contexts, result_contexts
from ragtrack.errors import RagtrackError
from ragtrack.production import fields
from ragtrack.production.fields import FieldError
from ragtrack.production.messages import epoch_ms, utc_iso
from ragtrack.production.sources import Batch, PulledMessage, SourceRequest, UserFeedback
from ragtrack.production.sources.dify import (
    WEBAPP,
    DifyFeedbacks,
    Rated,
    load_platform_spec,
    ratings_of,
    read_feedbacks,
    spec_endpoint,
)
from ragtrack.tracking.production import TraceExperiment
from ragtrack.tracking.store import resolve_tracking_uri, trace_id_filters

if TYPE_CHECKING:
    from mlflow.entities import Span, Trace, TraceInfo

MARGIN_MS = 10 * 60 * 1000  # traces reach a store out of order (Dify exports them asynchronously)
PAGE = 200
DIFY_AUXILIARY = {"tool", "moderation", "suggested_question", "generate_conversation_name"}
NO_TRACE = "feedbacks on messages with no trace in the experiment (sent before tracing was on, or by another app)"
UNMATCHED = "feedbacks whose chatflow run could not be matched to a trace of the experiment"
_QUESTION_KEYS = ("question", "query", "input", "prompt", "user_input", "text")
_ANSWER_KEYS = ("answer", "output", "response", "text", "result", "content")
_LIKE = {"like", "thumbs_up", "thumbsup", "up", "positive", "good", "yes", "true", "1"}
_DISLIKE = {"dislike", "thumbs_down", "thumbsdown", "down", "negative", "bad", "no", "false", "0"}


class MlflowSource:
    name = "mlflow"
    coverage = "all"

    def __init__(
        self, experiment: TraceExperiment, app: str, dify: DifyFeedbacks | None, declared: dict[str, str] | None = None
    ):
        self.experiment, self.app, self.dify = experiment, app, dify
        self.declared = declared or {}  # the Dify spec's [agent.nodes]: role → node title
        # Several Dify apps may trace into one experiment: with the app's spec, only its traces are read.
        self.dify_app = dify.app_name() if dify else None
        self._traces = experiment.traces

    def batches(self, cursor: dict, known: Callable[[str], bool], progress: Callable[[str], None]) -> Iterator[Batch]:
        resume, ignored = fields.cursor_ms(cursor, "timestamp_ms")
        if ignored:
            progress(f"{self.app}: the saved cursor is ignored ({ignored}): reading every trace again")
        since = max(0, resume - MARGIN_MS)
        saved_runs = cursor.get("runs") if isinstance(cursor.get("runs"), dict) else {}
        # Dify message ID → the chatflow run that answered it
        runs: dict[str, str] = {k: v for k, v in saved_runs.items() if isinstance(v, str)}
        retrievals: dict[str, list[PlatformContext]] = {}
        pending: list[tuple[int, PulledMessage, bool]] = []  # (time, message, a Dify chatbot message)
        newest = resume
        read = others = 0
        malformed: Counter[str] = Counter()  # traces skipped for a field that is no value, by field
        for trace in self._traces(f"timestamp_ms >= {since}" if since else "", spans=True):
            read += 1
            newest = max(newest, trace.info.request_time)
            try:
                kind, message = _read(trace, malformed)
            except FieldError as e:
                malformed[e.skip("traces")] += 1
                continue
            if self.dify_app and _dify_app(trace) not in (None, self.dify_app):
                others += 1  # another Dify app tracing into the same experiment
            elif kind == "dataset_retrieval" and message is not None:
                retrievals[message.message_id] = message.contexts
            elif message is not None:
                # Node roles as an eval gives them: the spec's [agent.nodes], the rest inferred from node types.
                message.roles = assign_roles(message.nodes, message.answer, self.declared) if message.nodes else {}
                pending.append((trace.info.request_time, message, kind == "message"))
            if read % PAGE == 0:
                progress(f"{self.app}: {read} traces read")
        for _, message, chatbot in pending:
            if chatbot:
                message.contexts = retrievals.get(message.message_id, [])
        skipped = f", {others} of other Dify apps skipped" if others else ""
        progress(f"{self.app}: {read} traces read, {len(pending)} answered questions{skipped}")
        messages = [m for _, m, _ in sorted(pending, key=lambda p: (p[0], p[1].message_id))]
        ratings, unresolved, feedbacks, complete = self._ratings(runs, messages, known, progress)
        unresolved.update(malformed)
        for m in messages:  # stored with their ratings; the snapshot below re-rates those stored before
            m.feedback = ratings.get(m.message_id)
        for i in range(0, len(messages), PAGE):
            yield Batch(messages=messages[i : i + PAGE], pulled=len(messages[i : i + PAGE]))
        yield Batch(
            ratings=ratings,
            ratings_complete=complete,
            unresolved=unresolved,
            feedbacks=feedbacks,
            cursor={"timestamp_ms": newest, "runs": runs},
        )

    def _ratings(
        self, runs: dict[str, str], pulled: list[PulledMessage], known: Callable[[str], bool], progress
    ) -> tuple[dict[str, UserFeedback], Counter[str], int, bool]:
        """Every rating: the HUMAN feedback of every trace (an own app's thumbs, a reviewer's on a Dify
        trace: keyed by the message the trace holds), and Dify's ``/app/feedbacks``
        joined by message ID (a chatflow's through the runs its conversation's messages map to); last,
        whether every feedback record could be read (a listing with one that could not withdraws none)."""
        assessed = {t.info.trace_id: f for t in self._traces("", spans=False) if (f := _assessed(t.info))}
        ratings: dict[str, UserFeedback] = {}
        for listed in trace_id_filters(list(assessed)):  # a rated trace's spans say which message it holds
            for trace in self._traces(listed, spans=True):
                kind, message = _read_or_skip(trace)
                if message is not None and kind != "dataset_retrieval":
                    ratings[message.message_id] = assessed[trace.info.trace_id]
        unresolved: Counter[str] = Counter()
        if self.dify is None:
            return ratings, unresolved, 0, True
        feedbacks = self.dify.feedbacks(progress)
        rated, unresolved, complete = read_feedbacks(feedbacks)
        by_message = ratings_of(rated)
        read = {m.message_id for m in pulled}
        for f in rated:
            message = f.message_id
            if message not in by_message:
                continue  # no rating
            if message not in runs and not (known(message) or message in read):
                self._match_runs(f, runs, unresolved)
                if message not in runs:
                    continue
            ratings[runs.get(message, message)] = by_message[message]
        return ratings, +unresolved, len(feedbacks), complete

    def _match_runs(self, feedback: Rated, runs: dict[str, str], unresolved: Counter[str]) -> None:
        """A feedback on a message no trace names: a chatflow's, whose run trace has only the conversation.
        Its conversation's messages (read as its end user) are matched to the conversation's runs by
        question and nearest start; ``runs`` keeps what was matched (message ID → run ID)."""
        conversation = feedback.conversation_id
        query = TraceExperiment.session_is(conversation)
        turns = [
            (m.message_id, m.question, epoch_ms(m.created_at))
            for t in self._traces(query, spans=True)
            if (read := _read_or_skip(t))[0] == "workflow" and (m := read[1]) is not None
        ]
        if not turns:
            unresolved[NO_TRACE] += 1
            return
        user = self.dify.end_user(feedback.end_user)
        if user is None or user.get("type") != "service_api":
            unresolved[WEBAPP if user else UNMATCHED] += 1
            return
        free = [t for t in turns if t[0] not in runs.values()]
        for m in self.dify.messages(conversation, str(user.get("session_id"))) or []:
            candidates = [t for t in free if t[1] == str(m.get("query") or "")]
            try:
                message_id = fields.field(m, "id", fields.identifier)
                at = epoch_ms(fields.field(m, "created_at", fields.timestamp))
            except FieldError:
                continue  # a message that cannot be matched by time: its feedback is counted unmatched below
            if candidates and message_id not in runs:
                best = min(candidates, key=lambda t: abs(t[2] - at))
                free.remove(best)
                runs[message_id] = best[0]
        if feedback.message_id not in runs:
            unresolved[UNMATCHED] += 1


def _read(trace: Trace, skipped: Counter[str] | None = None) -> tuple[str, PulledMessage | None]:
    """(kind, message) of one trace: ``dataset_retrieval`` (contexts only), ``message`` (a Dify chatbot
    message, contexts to join), ``workflow``, ``own`` — or ``skip`` with None. Node spans that cannot
    be read are counted in ``skipped``, by reason."""
    spans = trace.data.spans
    root = next((s for s in spans if s.parent_id is None), None)
    if root is None:
        return "skip", None
    attributes = root.attributes or {}
    info = trace.info
    user = fields.text(info.trace_metadata.get(TraceExperiment.USER))[0] or None
    session = fields.text(info.trace_metadata.get(TraceExperiment.SESSION))[0] or None
    created = fields.named("request_time", info.request_time, fields.timestamp)
    if root.name in DIFY_AUXILIARY and "message_id" in attributes:
        return "skip", None
    if root.name == "dataset_retrieval" and "message_id" in attributes:
        outputs = root.outputs if isinstance(root.outputs, dict) else {}
        contexts = _contexts(outputs.get("documents"))
        message_id = fields.field(attributes, "message_id", fields.identifier)
        return "dataset_retrieval", PulledMessage(message_id, "", "", created, contexts)
    if root.name == "message" and "message_id" in attributes and "conversation_mode" in attributes:
        return "message", PulledMessage(
            message_id=fields.field(attributes, "message_id", fields.identifier),
            question=_question(root.inputs),
            answer=_text(root.outputs),
            created_at=created,
            conversation_id=_conversation(attributes) or session,
            user=user,
        )
    if root.name == "workflow" and "workflow_run_id" in attributes:
        message_id = fields.field(
            attributes, "message_id" if attributes.get("message_id") else "workflow_run_id", fields.identifier
        )
        nodes = _nodes([s for s in spans if s.parent_id == root.span_id], skipped if skipped is not None else Counter())
        retriever = [s for s in spans if s.span_type == "RETRIEVER" and s.parent_id is not None]
        contexts = node_contexts(nodes) if nodes else None
        return "workflow", PulledMessage(
            message_id=message_id,
            question=_question(root.inputs),
            answer=_text(root.outputs),
            created_at=created,
            contexts=[c for s in retriever for c in _contexts(s.outputs)] if contexts is None else contexts,
            conversation_id=session or _conversation(attributes),
            user=user,
            nodes=nodes,
        )
    question = _question(root.inputs)
    if not question:
        return "skip", None
    retriever = [s for s in spans if s.span_type == "RETRIEVER"]
    return "own", PulledMessage(
        message_id=info.trace_id,
        question=question,
        answer=_text(root.outputs),
        created_at=created,
        contexts=[c for s in retriever for c in _contexts(s.outputs)],
        conversation_id=session,
        user=user,
        feedback=_assessed(info),
    )


def _nodes(spans: list[Span], skipped: Counter[str]) -> list[Node]:
    """A workflow trace's node spans as the nodes of the run, in the order they started (Dify writes
    them in that order; a tie keeps it); a span that cannot be read is counted, by reason, and left out."""
    out: list[Node] = []
    for span in sorted(spans, key=lambda s: s.start_time_ns or 0):
        try:
            out.append(_node(span, len(out) + 1))
        except FieldError as e:
            skipped[e.skip("workflow node spans")] += 1
    return out


def _node(span: Span, index: int) -> Node:
    """One node span as Dify's provider writes it (see the module), read as a streamed node is."""
    attributes = span.attributes or {}
    node_type = fields.field(attributes, "node_type", fields.identifier)
    status = fields.field(attributes, "status", fields.identifier)
    node_id = fields.field(attributes, "node_id", fields.identifier)
    title = fields.named("name", span.name, fields.text)[0] or node_id
    outputs, contexts = _node_outputs(node_type, status, span.outputs)
    usage = attributes.get("usage") if isinstance(attributes.get("usage"), dict) else {}
    start = span.start_time_ns or 0
    end = max(start, span.end_time_ns or start)
    return Node(
        id=node_id,
        type=node_type,
        title=title,
        index=index,
        status=status,
        error=_failure(span) if status in FAILED else None,
        elapsed_s=round((end - start) / 1e9, 6),
        tokens=int(number(usage.get("total_tokens")) or 0),
        cost_usd=(number(usage.get("total_price")) or 0.0) if usage.get("currency", "USD") == "USD" else 0.0,
        start_ns=start,
        end_ns=end,
        inputs=_node_inputs(span.inputs),
        outputs=outputs,
        contexts=contexts,
    )


def _node_outputs(node_type: str, status: str, outputs: Any) -> tuple[dict[str, Any], list[PlatformContext] | None]:
    """(outputs, contexts) of a node span: a retrieval node's documents (or Dify's empty ``result``)
    are its contexts; an LLM node's text alone is ``{"text": …}``, as its ``node_finished`` says it."""
    if node_type == RETRIEVAL:
        if isinstance(outputs, list):
            return {}, _contexts(outputs)
        if isinstance(outputs, dict) and isinstance(outputs.get("result"), list):
            rest = {k: v for k, v in outputs.items() if k != "result"}
            return rest, result_contexts(outputs["result"])
        if status in FAILED and not outputs:
            return {}, None
        raise FieldError("neither documents nor a result list", outputs, "outputs")
    if isinstance(outputs, str):
        return {"text": outputs}, None
    if isinstance(outputs, dict):
        return outputs, None
    if outputs is None:
        return {}, None
    raise FieldError("neither an object nor a text", outputs, "outputs")


def _node_inputs(inputs: Any) -> dict[str, Any]:
    """A node span's inputs as a node's: Dify gives an LLM node's prompt messages, the others' variables."""
    if isinstance(inputs, dict):
        return inputs
    return {} if inputs is None else {"prompt": inputs}


def _failure(span: Span) -> str | None:
    """What a failed node span says of its failure (Dify: ``Node failed with status: failed``)."""
    for event in span.events or ():
        message = (event.attributes or {}).get("exception.message")
        if isinstance(message, str) and message:
            return message
    return None


def _conversation(attributes: dict) -> str | None:
    """A Dify trace's ``conversation_id`` attribute, checked (None when it has none)."""
    return fields.field(attributes, "conversation_id", fields.identifier) if attributes.get("conversation_id") else None


def _read_or_skip(trace: Trace) -> tuple[str, PulledMessage | None]:
    """:func:`_read`, a trace with a field that is no value skipped (counted where traces are listed)."""
    try:
        return _read(trace)
    except FieldError:
        return "skip", None


def _dify_app(trace: Trace) -> str | None:
    """The Dify app a provider trace names (``app_name``; a retrieval trace's in its ``metadata``)."""
    root = next((s for s in trace.data.spans if s.parent_id is None), None)
    attributes = (root.attributes or {}) if root is not None else {}
    nested = attributes.get("metadata") if isinstance(attributes.get("metadata"), dict) else {}
    name = attributes.get("app_name") or nested.get("app_name")
    return str(name) if name and (root.name in ("message", "dataset_retrieval", "workflow")) else None


def _question(inputs: Any) -> str:
    """The question of a root span's inputs: a string, a known key, or the last user chat message."""
    if isinstance(inputs, str):
        return inputs
    if isinstance(inputs, dict):
        for key in _QUESTION_KEYS:
            if isinstance(inputs.get(key), str) and inputs[key].strip():
                return inputs[key]
        inputs = inputs.get("messages") or inputs.get("inputs")
    if isinstance(inputs, list):
        users = [m for m in inputs if isinstance(m, dict) and m.get("role") == "user"]
        if users:
            content = users[-1].get("content")
            return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    return ""


def _text(outputs: Any) -> str:
    """The answer of a root span's outputs: a string, a known key, the only string value, or a chat choice."""
    if isinstance(outputs, str):
        return outputs
    if isinstance(outputs, dict):
        for key in _ANSWER_KEYS:
            if isinstance(outputs.get(key), str):
                return outputs[key]
        choices = outputs.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            return _text(choices[0].get("message") or choices[0].get("text"))
        if not outputs:
            return ""  # a run that failed before any output
        strings = [v for v in outputs.values() if isinstance(v, str)]
        if len(strings) == 1:
            return strings[0]
    return "" if outputs is None else json.dumps(outputs, ensure_ascii=False)


def _contexts(documents: Any) -> list[PlatformContext]:
    """MLflow's (or Dify's) documents as contexts: the text, an ID (segment, chunk, doc URI) and a score."""
    out = []
    for rank, d in enumerate(documents if isinstance(documents, list) else [], start=1):
        if not isinstance(d, dict):
            continue
        meta = d.get("metadata") if isinstance(d.get("metadata"), dict) else {}
        unit = (
            meta.get("segment_id") or meta.get("chunk_id") or d.get("id") or meta.get("doc_uri") or meta.get("doc_id")
        )
        score = meta.get("score")
        out.append(
            PlatformContext(
                id=str(unit or f"document@{rank}"),
                text=str(d.get("page_content") or ""),
                doc_id=str(meta.get("document_id") or ""),
                doc_name=str(meta.get("document_name") or ""),
                score=float(score) if isinstance(score, int | float) and not isinstance(score, bool) else None,
            )
        )
    return out


def _assessed(info: TraceInfo) -> UserFeedback | None:
    """The latest valid HUMAN feedback of a trace read as a like or a dislike (None: no such feedback)."""
    found = []
    for a in info.assessments or ():
        source = getattr(a.source, "source_type", "")
        if a.valid is False or source != "HUMAN" or getattr(a, "feedback", None) is None:
            continue
        value = a.feedback.value
        word = str(value).strip().lower().replace(" ", "_").replace("-", "_")
        rating = "like" if word in _LIKE else "dislike" if word in _DISLIKE else None
        if rating:
            found.append((a.last_update_time_ms or a.create_time_ms or 0, rating, a.rationale, a.create_time_ms))
    if not found:
        return None
    _, rating, comment, at = max(found, key=lambda f: f[0])
    return UserFeedback(rating, comment or None, utc_iso(at / 1000) if at else None)


def open_source(request: SourceRequest) -> MlflowSource:
    if not request.experiment:
        raise RagtrackError("--from mlflow needs the experiment holding the app's traces")
    experiment = TraceExperiment(
        request.source_uri or resolve_tracking_uri(request.config, request.tracking_uri), request.experiment
    )
    if experiment.name == f"{request.config.project.experiment}-production":
        raise RagtrackError(f"{experiment.name} is where pulled messages are stored, not an app's traces")
    dify, declared = None, {}
    if request.version:
        spec = load_platform_spec(request, "dify")
        dify = DifyFeedbacks(spec_endpoint(spec, request, dify_check), spec.name)
        declared = dict(spec.spec.agent.nodes)
    return MlflowSource(experiment, request.app or (dify.label if dify else experiment.name), dify, declared)
