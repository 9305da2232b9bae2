"""TraceBatch (ragtrack.tracking.trace_writer) against a real SQLite tracking store: what it takes, what it
leaves to MLflow's exporter, and what the store holds once it wrote."""

from __future__ import annotations

import mlflow
from mlflow import MlflowClient
from mlflow.entities import SpanType

from ragtrack.tracking.trace_writer import TraceBatch


def _root(name: str, experiment_id: str):
    return mlflow.start_span_no_context(
        name, span_type=SpanType.AGENT, inputs={"q": name}, experiment_id=experiment_id, tags={"which": name}
    )


def _spans(client: MlflowClient, experiment_id: str) -> dict[str, int]:
    """Trace name → how many spans the store gives back with it."""
    found = client.search_traces(locations=[experiment_id], max_results=100)
    return {t.info.tags["which"]: len(t.data.spans) for t in found}


def test_a_batch_takes_its_own_traces_whole_and_leaves_others_to_mlflows_exporter(tmp_path):
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    mlflow.set_tracking_uri(client.tracking_uri)
    experiment = client.create_experiment("writer")
    with TraceBatch(client) as batch:
        ours = _root("ours", experiment)
        batch.own(ours)
        child = mlflow.start_span_no_context("step", parent_span=ours, inputs={"x": 1})
        child.end(outputs={"y": 2})
        ours.end(outputs="answer")
        theirs = _root("theirs", experiment)  # an app's own trace, not owned: MLflow exports it
        theirs.end(outputs="other")
    mlflow.flush_trace_async_logging()
    assert [t.info.trace_id for t in batch.finished] == [ours.trace_id]
    assert _spans(client, experiment) == {"theirs": 1}  # ours is held until written

    assert batch.write(experiment) == [ours.trace_id] and batch.finished == []
    assert _spans(client, experiment) == {"theirs": 1, "ours": 2}
    stored = client.get_trace(ours.trace_id)
    assert stored.info.request_preview == '{"q": "ours"}' and stored.info.response_preview == '"answer"'
    assert '"num_spans": 2' in stored.info.trace_metadata["mlflow.trace.sizeStats"]


def test_the_exporter_is_mlflows_again_after_the_block(tmp_path):
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    mlflow.set_tracking_uri(client.tracking_uri)
    experiment = client.create_experiment("writer")
    with TraceBatch(client):
        pass
    after = _root("after", experiment)
    after.end(outputs="x")
    mlflow.flush_trace_async_logging()
    assert _spans(client, experiment) == {"after": 1}
