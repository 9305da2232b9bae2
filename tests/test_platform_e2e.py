"""The README's Dify walkthrough, run as written against the loopback Dify server: import the
knowledge base, write the golden set against the imported passages, evaluate the app and v1 on the
same corpus, compare, promote. The app's per-item retrieval metrics must equal a hand computation
from the segments the server returned, mapped through the imported ID table."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlflow
import pytest

from ragtrack.config import load_config
from ragtrack.testing.dify_server import DifyServer
from ragtrack.tracking.store import open_store

from .readme import figures, printed, run_shell, stand_in, walkthrough
from .test_platform_agents import by_hand, dify_segments, question_of

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_readme_dify_walkthrough_runs_as_written(tmp_path, monkeypatch, prefork):
    """Over 60 s: README's Dify walkthrough as `ragtrack` processes in a shell (the test is about what they
    print), the Dify app evaluated over HTTP on the whole shipped golden set."""
    project = tmp_path / "project"
    shutil.copytree(REPO / "pipelines", project / "pipelines")
    shutil.copytree(REPO / "golden", project / "golden")
    monkeypatch.chdir(project)

    # Terminal 1 runs in this process, on a free port instead of 8080, so its replies can be checked.
    with stand_in("dify server") as (server, port):
        assert isinstance(server, DifyServer)
        example = project / "pipelines" / "examples" / "dify-app.toml"
        example.write_text(example.read_text().replace("127.0.0.1:8080", f"127.0.0.1:{port}"))
        script = walkthrough("dify").replace("127.0.0.1:8080", f"127.0.0.1:{port}")
        done = run_shell(script, project, tmp_path, prefork)
        out = done.stdout + done.stderr
        assert "error:" not in out and "Traceback" not in out, out
        assert "ok 8 items, 671 passages in 35 documents" in out and "v1 promoted" in out, out

        # The import: one passage per segment, and the ID table maps each segment to it.
        passage_of = {s.id: f"{s.document.name}#{s.position}" for s in server.knowledge.segments}
        table = json.loads((project / "golden" / "dify-kb.ids.json").read_text())
        assert table["segments"] == {sid: [pid] for sid, pid in passage_of.items()}

        # The app's metrics, item by item, from the segments the server returned.
        store = open_store(load_config(project))
        app = store.latest_eval("dify-app")
        replies = {question_of(x.request.body): x.response.body for x in server.replies("chat_messages")}
        records = store.records(app.run_id)
        assert len(records) == 8 and not any(r.errors for r in records)
        for record in records:
            units = [[passage_of[seg]] for seg in dify_segments(replies[record.question])]
            assert [c.passage_ids for c in record.contexts] == units, record.id
            assert {c.mapping for c in record.contexts} == {"id_table"}
            assert record.retrieval == pytest.approx(by_hand(units, record.gt_context_ids)), record.id

        # v1 ran on the same corpus and golden set; promote decided by the rule, exit status included.
        v1 = store.latest_eval("v1", app.golden_digest, app.judge_identity)
        wins = app.metrics["correctness"] > v1.metrics["correctness"]
        wins = wins and app.metrics["groundedness"] >= v1.metrics["groundedness"]
        assert ("dify-app promoted" in out) == wins and ("dify-app refused" in out) != wins, out
        assert done.returncode == (0 if wins else 1)
        assert "v1 vs dify-app" in out and "comparison run" in out

        # The README's table of this walkthrough is what these runs measured, figure by figure.
        table = figures("dify")
        assert app.golden_digest.startswith("5e77c531c297dcc5")  # the digest the README quotes
        for label, run in (("v1 (on the imported corpus)", v1), ("dify-app (loopback Dify)", app)):
            assert table[label] == printed(table[label], run.metrics), label

        # The registered model of the app answers through the app.
        monkeypatch.setenv("DIFY_APP_KEY", "app-demo-key")
        mlflow.set_tracking_uri(store.tracking_uri)
        asked = len(server.replies("chat_messages"))
        [answer] = mlflow.pyfunc.load_model(f"models:/rag-agent/{app.model_version}").predict(
            ["Which widget of VAE Decode (Tiled) saves memory?"]
        )
        assert answer["answer"] and answer["retrieved_ids"][0] in passage_of.values()
        assert len(server.replies("chat_messages")) == asked + 1


@pytest.mark.slow
def test_the_readme_coze_walkthrough_runs_as_written(tmp_path, monkeypatch, prefork):
    """The bot's slices carry no IDs: each maps by its text to passages of the document it came from,
    and every item's retrieval metrics are the hand computation from those passages."""
    from ragtrack.testing.coze_server import CozeServer

    project = tmp_path / "project"
    shutil.copytree(REPO / "pipelines", project / "pipelines")
    shutil.copytree(REPO / "golden", project / "golden")
    with stand_in("coze server") as (server, port):
        assert isinstance(server, CozeServer)
        example = project / "pipelines" / "examples" / "coze-bot.toml"
        text = example.read_text()
        assert f'bot_id = "{server.bot_id}"' in text  # the example names the stand-in's bot
        example.write_text(text.replace("127.0.0.1:8888", f"127.0.0.1:{port}"))
        done = run_shell(walkthrough("coze"), project, tmp_path, prefork)
        out = done.stdout + done.stderr
        assert done.returncode == 0 and "Traceback" not in out, out
        assert "coze-bot" in out.rsplit("versions", 1)[-1], out  # `ragtrack versions` lists it

        store = open_store(load_config(project))
        run = store.latest_eval("coze-bot")
        records = store.records(run.run_id)
        assert len(records) == 48 and not any(r.errors for r in records)
        chats = {c.question: c for c in server.chats.values()}
        for record in records:
            hits = chats[record.question].hits
            assert [c.text for c in record.contexts] == [s.text for s, _ in hits], record.id
            for context, (segment, _) in zip(record.contexts, hits, strict=True):
                assert context.passage_ids and context.mapping.startswith("text"), (record.id, context)
                assert all(p.split("#")[0] == segment.document.name for p in context.passage_ids), (record.id, context)
            units = [c.passage_ids for c in record.contexts]
            assert record.retrieval == pytest.approx(by_hand(units, record.gt_context_ids)), record.id
        assert run.metrics["mapping/unmapped_share"] == 0.0
        assert mlflow.MlflowClient(store.tracking_uri).get_run(run.run_id).data.params["bot_name"] == "kb bot"

        # The registered model of the bot answers through the bot.
        monkeypatch.setenv("COZE_API_TOKEN", "pat-demo-token")
        mlflow.set_tracking_uri(store.tracking_uri)
        [answer] = mlflow.pyfunc.load_model(f"models:/rag-agent/{run.model_version}").predict(
            ["Which widget of VAE Decode (Tiled) saves memory?"]
        )
        assert answer["answer"] and len(server.chats) == 49
