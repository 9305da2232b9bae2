"""``ragtrack logs pull``: production conversations → one MLflow trace each, in a real store.

JSONL exports here; the platforms (Dify's service API and MLflow tracing provider, RAGFlow's
sessions) over real HTTP against the loopback stand-ins in test_production_platforms.py. Every
figure is checked against what the input holds, counted by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pytest
from click.testing import CliRunner

from ragtrack.api import pull_logs
from ragtrack.cli import main
from ragtrack.config import load_config
from ragtrack.errors import InputError, RagtrackError
from ragtrack.production import pull as pull_module
from ragtrack.production.messages import hash_user
from ragtrack.production.sources import jsonl as jsonl_source
from ragtrack.tracking.production import RATING, ProductionLog, read_messages
from ragtrack.tracking.store import Tag, open_store
from tests.conftest import killed_after_writes

STEPS = "guides/sampler.md#sampler-guide/steps"
CFG = "guides/sampler.md#sampler-guide/guidance/cfg-value"
CHECKPOINTS = "guides/models.md#model-files/checkpoints"


def record(n: int, **fields) -> dict:
    base = {
        "question": f"question {n}: how many steps does the sampler take?",
        "answer": "20 by default.",
        "contexts": [{"text": "The steps setting defaults to 20. More steps rarely help past 30."}],
        "rating": None,
        "comment": None,
        "user": f"user-{n % 3}",
        "created_at": f"2025-03-0{1 + n % 2}T09:30:00+08:00",
        "app_version": "bot-v1",
    }
    return {**base, **fields}


def write_jsonl(path: Path, rows: list[dict | str]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows))
    return path


def run(project: Path, *args: str):
    return CliRunner().invoke(main, ["--root", str(project), "logs", "pull", *args])


def stored(project: Path):
    return read_messages(open_store(load_config(project)))


def test_a_jsonl_export_is_stored_once_with_mapped_contexts_hashed_users_and_ratings(project, tmp_path):
    rows = [
        record(1, rating="dislike", comment="it says 20, I need the maximum"),
        record(2, rating="like", app_version="bot-v2", contexts=[{"text": "ignored", "id": CHECKPOINTS}]),
        record(3, message_id="m-3", contexts=[], user=None),
        record(4, created_at="2025-03-04T01:00:00"),  # no zone: UTC
    ]
    export = write_jsonl(tmp_path / "export.jsonl", rows)

    first = run(project, "--from", "jsonl", str(export))
    assert first.exit_code == 0, first.output
    assert "pulled 4 messages from jsonl (export): 4 new messages, 0 re-rated" in first.output
    assert "stored for bot-v1, bot-v2: 4 messages, 1 disliked, 1 liked, 2 unrated" in first.output
    second = run(project, "--from", "jsonl", str(export))
    assert "pulled 4 messages from jsonl (export): 0 new messages, 0 re-rated" in second.output, second.output

    messages = {m.question.split(":")[0]: m for m in stored(project)}
    assert len(messages) == 4 and {m.source for m in messages.values()} == {"jsonl"}
    one, two, three, four = (messages[f"question {n}"] for n in (1, 2, 3, 4))
    assert (one.app, one.rating, one.comment) == ("bot-v1", "dislike", "it says 20, I need the maximum")
    assert one.created_at == "2025-03-02T01:30:00Z" and four.created_at == "2025-03-04T01:00:00Z"
    assert [(c.passage_ids, c.mapping) for c in one.contexts] == [([STEPS], "text 1.00")]
    assert [(c.unit_id, c.passage_ids, c.mapping) for c in two.contexts] == [(CHECKPOINTS, [CHECKPOINTS], "passage_id")]
    assert (two.app, two.rating) == ("bot-v2", "like")
    assert three.message_id == "m-3" and three.contexts == [] and three.user is None and three.rating is None
    # Users only hashed, with the project's secret (kept outside the store).
    secret = (project / ".ragtrack" / "production" / "user-hash-secret").read_text().strip()
    assert one.user == four.user == hash_user("user-1", secret) and two.user == hash_user("user-2", secret)
    assert (project / ".ragtrack" / "production" / "user-hash-secret").stat().st_mode & 0o077 == 0
    # The traces: tagged, timed at the answer, the rating a HUMAN feedback assessment.
    store = open_store(load_config(project))
    trace = mlflow.get_trace(one.trace_id)
    assert trace.info.request_time == 1740879000000  # 2025-03-02T01:30:00Z
    assert trace.info.tags[Tag.PRODUCTION_APP] == "bot-v1" and trace.info.tags[Tag.PRODUCTION_USER] == one.user
    assert trace.info.trace_metadata["mlflow.trace.user"] == one.user
    (rating,) = [a for a in trace.info.assessments if a.name == RATING]
    assert (rating.value, rating.rationale, rating.source.source_type) == ("dislike", one.comment, "HUMAN")
    assert not any("user-1" in json.dumps(t.to_dict()) for t in _all_traces(store))


def _all_traces(store):
    log = ProductionLog(store)
    return store.client.search_traces(locations=[log.experiment_id], include_spans=True, max_results=500)


def test_a_rating_changed_since_overrides_its_assessment_and_a_withdrawn_one_is_removed(project, tmp_path):
    export = tmp_path / "export.jsonl"
    write_jsonl(export, [record(1, rating="like", message_id="m1"), record(2, rating="like", message_id="m2")])
    pull_logs("jsonl", path=export, root=project)
    write_jsonl(
        export,
        [record(1, rating="dislike", comment="wrong", message_id="m1"), record(2, message_id="m2"), record(3)],
    )
    report = pull_logs("jsonl", path=export, root=project)
    assert (report.pulled, report.new, report.updated) == (3, 1, 2)
    assert (report.stored, report.liked, report.disliked) == (3, 0, 1)

    by_id = {m.message_id: m for m in stored(project)}
    assert (by_id["m1"].rating, by_id["m1"].comment, by_id["m2"].rating) == ("dislike", "wrong", None)
    history = [a for a in mlflow.get_trace(by_id["m1"].trace_id).info.assessments if a.name == RATING]
    assert sorted((a.value, a.valid) for a in history) == [("dislike", True), ("like", False)]  # MLflow keeps it
    assert not [a for a in mlflow.get_trace(by_id["m2"].trace_id).info.assessments if a.name == RATING]
    assert pull_logs("jsonl", path=export, root=project).updated == 0


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            record(1, rating="thumbs-down"),
            "export.jsonl:2: rating: unknown value 'thumbs-down'; expected 'like' or 'dislike'",
        ),
        ({k: v for k, v in record(1).items() if k != "answer"}, "export.jsonl:2: answer: required field is missing"),
        (record(1, created_at="yesterday"), "export.jsonl:2: created_at: not an ISO 8601 time"),
        (record(1, contexts=[{"txt": "x"}]), "export.jsonl:2: contexts.0.txt: unknown field"),
        (record(1, raiting="like"), "export.jsonl:2: raiting: unknown field (did you mean 'rating'?)"),
        ('{"question": "half a line', "export.jsonl:2: bad JSON"),
        (record(0, message_id="m0"), "export.jsonl:2: message_id: 'm0' is also the message_id of line 1"),
    ],
)
def test_a_bad_line_is_one_error_naming_file_line_and_field_and_nothing_is_stored(project, tmp_path, line, expected):
    export = write_jsonl(tmp_path / "export.jsonl", [record(0, message_id="m0"), line])
    result = run(project, "--from", "jsonl", str(export))
    assert result.exit_code == 2
    assert result.output.startswith("error: ") and expected in result.output, result.output
    assert not (project / "mlruns").exists()  # checked before the store was opened


def test_unknown_sources_and_missing_arguments_are_refused(project, tmp_path):
    result = run(project, "--from", "langfuse")
    assert (
        result.exit_code == 2
        and "unknown log source 'langfuse'; expected one of: dify, ragflow, mlflow, jsonl" in result.output
    )
    assert "--from jsonl needs the export" in run(project, "--from", "jsonl").output
    assert "--from mlflow needs the experiment" in run(project, "--from", "mlflow").output
    with pytest.raises(RagtrackError, match="no such file"):
        pull_logs("jsonl", path=tmp_path / "missing.jsonl", root=project)
    with pytest.raises(InputError, match="holds no records"):
        pull_logs("jsonl", path=write_jsonl(tmp_path / "empty.jsonl", []), root=project)


def test_secret_values_never_reach_the_store(project, tmp_path, monkeypatch):
    key = "sk-live-0123456789abcdefABCDEF"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    export = write_jsonl(
        tmp_path / "export.jsonl",
        [record(1, answer=f"use the key {key}", comment=f"it printed {key}", rating="dislike")],
    )
    pull_logs("jsonl", path=export, root=project)
    (message,) = stored(project)
    assert key not in message.answer and key not in (message.comment or "") and "***" in message.answer
    assert not any(key in json.dumps(t.to_dict()) for t in _all_traces(open_store(load_config(project))))


def test_a_pull_stopped_half_way_keeps_what_it_stored_and_the_next_finishes_without_duplicates(
    project, tmp_path, monkeypatch
):
    monkeypatch.setattr(pull_module, "WRITE_BATCH", 2)  # store every two messages, so it stops between writes
    monkeypatch.setattr(jsonl_source, "BATCH", 2)
    export = write_jsonl(tmp_path / "export.jsonl", [record(n, message_id=f"m{n}") for n in range(7)])
    with pytest.raises(KeyboardInterrupt):
        pull_logs("jsonl", path=export, root=project, progress=killed_after_writes(2))
    assert {m.message_id for m in stored(project)} == {"m0", "m1", "m2", "m3"}
    report = pull_logs("jsonl", path=export, root=project)
    assert (report.new, report.stored) == (3, 7)
    assert sorted(m.message_id for m in stored(project)) == [f"m{n}" for n in range(7)]


def test_a_trace_left_without_its_spans_is_written_again(project, tmp_path):
    export = write_jsonl(tmp_path / "export.jsonl", [record(1, message_id="m1", rating="dislike")])
    # A process killed while MLflow wrote a trace leaves its root without the retrieve span: made here by
    # hand (a kill cannot be timed to fall between two spans).
    store = open_store(load_config(project))
    log = ProductionLog(store)
    root = mlflow.start_span_no_context(
        "bot-v1",
        inputs={"question": "half written"},
        tags={Tag.PRODUCTION_SOURCE: "jsonl", Tag.PRODUCTION_APP: "bot-v1", Tag.PRODUCTION_MESSAGE: "m1"},
        experiment_id=log.experiment_id,
    )
    root.end(outputs="")
    mlflow.flush_trace_async_logging()
    assert read_messages(store) == []  # not shown as a message
    assert pull_logs("jsonl", path=export, root=project).new == 1
    (message,) = stored(project)
    assert (message.message_id, message.rating, message.question) == ("m1", "dislike", record(1)["question"])
