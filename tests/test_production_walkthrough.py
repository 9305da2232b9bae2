"""docs/production-loop.md's walkthrough, run as written against the loopback Dify app and its seeded
traffic: pull → triage → propose → review → accept → eval the champion and a challenger on the grown
set → compare → monitor. Every figure is checked against the traffic plan, as far as Dify's service
API lets the pull see it (the rated conversations of service API users)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ragtrack.cli import main
from ragtrack.config import load_config
from ragtrack.corpus import load_corpus
from ragtrack.golden import load_golden
from ragtrack.testing.dify_server import DifyServer
from ragtrack.testing.traffic import traffic_plan
from ragtrack.tracking.store import Tag, open_store

from .readme import run_shell, stand_in, walkthrough
from .test_production_done import check_monitor, check_triage, fresh_project
from .test_production_platforms import service_api_view

PAGE = Path(__file__).resolve().parent.parent / "docs" / "production-loop.md"


@pytest.mark.slow
def test_the_production_loop_walkthrough_runs_as_written(tmp_path, shipped, shipped_passage_index, prefork):
    """Over 60 s: the walkthrough is a dozen `ragtrack` processes (each starts MLflow and torch), two evals
    of the shipped set among them; the test is about what a user's shell prints, so they stay processes."""
    plan = traffic_plan("en")
    # The session's v1 eval of the shipped set already holds v1's index and LLM replies (the walkthrough
    # evaluates v1 on that set first, and again on the grown one), and the passage index propose searches.
    v1_caches = [f for f in (shipped[0] / ".ragtrack" / "cache").iterdir() if f.is_dir()]
    project = fresh_project(tmp_path / "project", (*v1_caches, shipped_passage_index))
    with stand_in("production server") as (server, port):
        assert isinstance(server, DifyServer) and server.apps  # serving the plan's traffic
        script = walkthrough("production").replace("127.0.0.1:8080", f"127.0.0.1:{port}")
        done = run_shell(script, project, tmp_path, prefork)
    out = done.stdout + done.stderr
    assert "Traceback" not in out, out

    # 2. What Dify's service API could read: the rated conversations of its API users.
    visible: dict[str, object] = {}
    for version in plan.app_versions:
        seen, webapp, _ = service_api_view(plan, version)
        visible.update(seen)
        line = f"pulled {len(seen)} messages and "
        assert line in out and f"  {webapp} feedbacks of WebApp users" in out, (version, out)
    assert "from its cursor: 0 new messages, 0 re-rated" in out
    assert f"203 of the plan's {len(plan.messages())}" in PAGE.read_text(encoding="utf-8") and len(visible) == 203

    # 3. The six problems first, with their counts as pulled; the covered one marked.
    check_triage(json.loads((project / "triage.json").read_text()), plan, visible)

    # 4-5. Five candidates became golden items with the plan's GT and their provenance.
    corpus = load_corpus(project / "golden" / "kb")
    golden = load_golden(project / "golden" / "golden.jsonl", corpus)
    new = [i for i in golden.items if i.provenance is not None]
    assert len(golden) == 53 and len(new) == 5
    by_id = {m.message_id: m for m in plan.messages()}
    for item in new:
        (key,) = {by_id[i].problem for i in item.provenance.messages}
        problem = plan.problem(key)
        assert problem.covered_by is None and set(item.gt_context_ids) == set(problem.gt_passage_ids), key
        assert item.type == problem.type and item.gt_answer and item.provenance.source == "production"
        assert set(item.provenance.messages) == {i for i in problem.message_ids if i in visible}, key
    assert "5 candidate(s) from production added" in out and "5/5 item(s) pass" in out
    assert "moved 5 item(s) into" in out

    # 6. v1's run on the old set is not compared with v3's on the grown one; measured again, it is.
    assert "error: v1 has no eval on the golden set and judge of v3's latest run" in out
    store = open_store(load_config(project))
    v3, v1 = store.latest_eval("v3"), store.latest_eval("v1")
    assert v3.golden_digest == v1.golden_digest == golden.digest
    assert len(store.eval_runs("v1")) == 2 and store.eval_runs("v1")[1].golden_digest != golden.digest
    assert "v1 vs v3" in out
    wins = (
        v3.metrics["correctness"] > v1.metrics["correctness"]
        and v3.metrics["groundedness"] >= v1.metrics["groundedness"]
    )
    assert ("v3 promoted" in out) == wins and ("v3 refused" in out) != wins, out

    # 7. A run per version and day; its dislikes are the exact count of the window's pulled messages.
    runs = check_monitor(project, visible)
    assert all(r.data.tags[Tag.PRODUCTION_COVERAGE] == "rated_conversations" for r in runs)
    assert "partial" in out
    assert done.returncode == (1 if any(r.data.tags[Tag.MONITOR_ALARM] == "true" for r in runs) else 0)
    again = CliRunner().invoke(main, ["--root", str(project), "monitor"])
    assert again.exit_code == 0 and "nothing new since the last run" in again.output, again.output
