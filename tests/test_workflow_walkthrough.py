"""docs/workflows.md's walkthrough, run as written against the loopback Dify workflow app: the node
figures it prints are the ones the page shows, and each is checked against the stand-in's own record of
what every node did. Slow (about a minute and a half): it runs ``ragtrack eval`` in a subprocess on the
shipped project, as a user would."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from ragtrack.config import load_config
from ragtrack.testing.dify_server import DifyServer
from ragtrack.tracking.store import open_store

from .readme import output, run_shell, stand_in, walkthrough

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_workflow_walkthrough_runs_as_written(tmp_path, monkeypatch):
    project = tmp_path / "project"
    for folder in ("pipelines", "golden"):
        shutil.copytree(REPO / folder, project / folder)
    monkeypatch.chdir(project)
    with stand_in("workflow server") as (server, port):
        assert isinstance(server, DifyServer) and server.app_mode == "workflow"
        done = run_shell(walkthrough("workflow").replace("127.0.0.1:8090", f"127.0.0.1:{port}"), project, tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode in (0, 1) and "Traceback" not in out and "error:" not in out, out
    printed = {re.sub(r"\s+", " ", line).strip() for line in done.stdout.splitlines()}
    missing = [line for line in output("workflow") if re.sub(r"\s+", " ", line).strip() not in printed]
    assert not missing, "docs/workflows.md shows lines the walkthrough did not print:\n" + "\n".join(missing)

    # Every figure, by hand from the stand-in's record of each run.
    items = [json.loads(line) for line in (project / "golden" / "flow-golden.jsonl").read_text().splitlines()]
    runs = {r.question: r for r in server.workflow_runs}
    assert len(items) == 8 and len(runs) == 8
    right = [i["id"] for i in items if runs[i["question"]].intent == i["intent"]]
    kept = [
        sum(t.casefold() in runs[i["question"]].query.casefold() for t in i["must_keep"]) / len(i["must_keep"])
        for i in items
    ]
    assert f"intent accuracy {len(right) / 8:.3f} (n=8)" in printed
    assert f"rewrite retention of must_keep terms {sum(kept) / 8:.3f} (n=8)" in printed
    store = open_store(load_config(project))
    records = {r.id: r for r in store.records(store.latest_eval("dify-flow").run_id)}
    for i, retained in zip(items, kept, strict=True):
        run, record = runs[i["question"]], records[i["id"]]
        assert record.answer == run.answer and record.intent == i["intent"]
        assert [c.unit_id for c in record.contexts] == next(iter(run.retrieved.values()))
        if retained < 1:
            assert record.first_failing == "rewrite", i["id"]
        elif run.intent != i["intent"]:
            assert record.first_failing == "intent", i["id"]
        elif record.retrieval["hit_rate"] == 0:
            assert record.first_failing == "retrieval", i["id"]
        else:
            assert record.first_failing in ("generation", ""), i["id"]
    assert [i["id"] for i in items if kept[items.index(i)] < 1] == ["A11"]
    assert set(records) - set(right) == {"A01"}
