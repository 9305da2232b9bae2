"""After a decision, every page that states a standing states the current one, and says what was waived.

A tiny project goes through the sequence a reviewer would: ``eval v1``, ``eval v5``, ``promote v1``,
``promote v5`` with overrides (``--allow-substitutes``: the offline machine has no reranker; a margin
below 0: v5 only ties v1 on five items), ``eval v3``, ``promote v3`` (refused). Then every eval run, model
version, the registered model and both experiments are read back from the real store: none names an
outdated champion, the accepted decision says what it waived, and each comparison keeps a regressions
table of both versions' scores and reasons.
"""

from __future__ import annotations

import json

import pytest

from ragtrack.api import compare, evaluate, promote
from ragtrack.config import load_config
from ragtrack.evaluation import metrics as m
from ragtrack.tracking.compare import REGRESSION_METRICS, REGRESSIONS_TABLE, regressions
from ragtrack.tracking.promotion import DECISIONS_VIEW
from ragtrack.tracking.runs import as_run
from ragtrack.tracking.store import SAVED_VIEW, Tag, open_store
from ragtrack.tracking.traces import item_traces

from .conftest import make_project

OVERRIDES = "--allow-substitutes --margin -0.1"


@pytest.fixture(scope="module")
def story(tmp_path_factory):
    """(root, store, {version: eval run}, {step: description of v5's eval run after it})."""
    root = make_project(tmp_path_factory.mktemp("pages") / "project")
    runs = {v: evaluate(v, root=root) for v in ("v1", "v5")}
    store = open_store(load_config(root))
    seen = {"eval v5": store.description(runs["v5"].run_id)}
    assert promote("v1", root=root).promoted
    seen["promote v1"] = store.description(runs["v5"].run_id)
    assert promote("v5", root=root, allow_substitutes=True, margin=-0.1).promoted
    seen["promote v5"] = store.description(runs["v5"].run_id)
    runs["v3"] = evaluate("v3", root=root)
    refused = promote("v3", root=root)
    assert not refused.promoted
    return root, store, runs, seen


def _pages(store) -> dict[str, str]:
    """Every page of the store that may state a standing: name → its Markdown."""
    pages = {f"eval run of {r.version}": store.description(r.run_id) for r in store.eval_runs()}
    pages |= {f"model version {mv.version}": mv.description for mv in store.model_versions()}
    pages["registered model"] = store.client.get_registered_model(store.registered_model).description
    pages["experiment"] = store.client.get_experiment(store.experiment_id).tags[Tag.NOTE]
    return pages


def test_every_page_states_the_current_champion_after_the_sequence(story):
    _, store, runs, seen = story
    assert store.champion() == ("2", "v5")
    pages = _pages(store)
    stale = ("champion **v1**", "champion v1", "v1 is the champion", "Champion: **v1**", "Champion: v1")
    for name, text in pages.items():
        assert not [s for s in stale if s in text], (name, text[:400])
    assert pages["eval run of v5"].splitlines()[1] == "This model version is the champion (v5)."
    for v in ("v1", "v3"):
        assert pages[f"eval run of {v}"].splitlines()[1].startswith("Against champion **v5**: correctness Δ ")
    assert pages["model version 2"].startswith("v5 is the champion since ")
    assert pages["model version 1"].startswith("v1 is not the champion: v5 (model version 2) is")
    assert pages["model version 3"].startswith("v3 is not the champion: v5 (model version 2) is")
    assert pages["experiment"].startswith("Champion: **v5** since ")
    # The tag refresh() reads: each latest eval was last described against model version 2.
    assert {r.version: r.standing for r in store.eval_runs()} == {"v1": "2", "v3": "2", "v5": "2"}
    # v5's own eval was rewritten at each decision: against no champion, against v1, then as the champion.
    assert seen["eval v5"].splitlines()[1].startswith("No champion yet: ")
    assert seen["promote v1"].splitlines()[1].startswith("Against champion **v1**: correctness Δ ")
    assert seen["promote v5"] == pages["eval run of v5"]
    # Its comparison with v1 stays linked, now as the one it won.
    assert "**Regressions** against model version 1, the champion this run was compared with" in seen["promote v5"]


def test_the_accepted_decision_says_which_overrides_applied_and_what_they_waived(story):
    _, store, runs, _ = story
    [run] = [
        r
        for r in store.client.search_runs([store.decisions_experiment_id])
        if r.data.tags.get(Tag.VERSION) == "v5" and r.data.tags.get(Tag.KIND) == "promotion"
    ]
    assert run.info.run_name == f"promote v5: promoted ({OVERRIDES})"
    assert run.data.tags[Tag.OUTCOME] == "promoted" and run.data.tags[Tag.OVERRIDES] == OVERRIDES
    waived = "--allow-substitutes: v5's eval used substituted models (rerank_model `BAAI/bge-reranker-base` → `none`)"
    assert run.data.params["overrides"] == f"{waived}; --margin -0.1: correctness must beat the champion by -0.1, not 0"
    first = run.data.tags[Tag.NOTE].splitlines()[0]
    assert first.startswith("**v5 promoted** over v1 (model version 1) on ") and f"· **overrides**: {waived}" in first
    registered = store.client.get_registered_model(store.registered_model).description
    assert f"v5 promoted over v1 (model version 1) [overrides: {waived};" in registered
    tags = store.client.get_model_version(store.registered_model, "2").tags
    assert tags[Tag.DECISION] == f"promoted ({OVERRIDES})"
    # A decision with nothing overridden says so in the same places.
    refused = next(r for r in store.client.search_runs([store.decisions_experiment_id]) if "v3" in r.info.run_name)
    assert refused.info.run_name == "promote v3: refused" and refused.data.tags[Tag.OVERRIDES] == Tag.NONE
    assert refused.data.params["overrides"] == Tag.NONE


def test_the_decisions_experiment_shows_outcome_and_overrides_as_columns(story):
    _, store, _, _ = story
    experiment = store.client.get_experiment(store.decisions_experiment_id)
    view = json.loads(experiment.tags[SAVED_VIEW + DECISIONS_VIEW])
    columns = json.loads(view["state"])["selectedColumns"]
    assert columns[:3] == [f"tags.`{Tag.VERSION}`", f"tags.`{Tag.OUTCOME}`", f"tags.`{Tag.OVERRIDES}`"]
    assert f"viewStateShareKey={DECISIONS_VIEW}" in experiment.tags[Tag.NOTE]


def test_registry_tags_are_one_short_line_each(story):
    """The model version page shows tags in a table whose rows clip a long value: every value is a headline."""
    _, store, _, _ = story
    for mv in store.model_versions():
        for name, value in mv.tags.items():
            assert value and "\n" not in value and len(value) <= Tag.HEADLINE_CHARS or name == Tag.DECISION_RUN, (
                name,
                value,
            )
    v5 = store.client.get_model_version(store.registered_model, "2")
    assert v5.tags[Tag.DESCRIPTION].endswith("…") and len(v5.tags[Tag.DESCRIPTION]) == Tag.HEADLINE_CHARS


def test_a_skipped_stage_is_said_in_the_params_that_describe_it(story):
    _, store, runs, _ = story
    params = store.client.get_run(runs["v5"].run_id).data.params
    assert params["spec.rerank.model"] == "skipped (BAAI/bge-reranker-base not available)"
    assert params["rerank_model"] == "none" and params["rerank_model_requested"] == "BAAI/bge-reranker-base"
    assert store.client.get_run(runs["v1"].run_id).data.params["spec.embedding.model"] == (
        "sentence-transformers/all-MiniLM-L6-v2"
    )
    ran = {"rerank_model_requested": "big", "rerank_model": "small", "embedding_model": "e"}
    assert as_run(ran, {"spec.rerank.model": "big", "spec.k": "5"}) == {
        "spec.rerank.model": "small (substitute for big)",
        "spec.k": "5",
    }


def _expected_regressions(store, a, b) -> list[tuple]:
    """By hand from both runs' records: every (item, metric) whose score differs, largest drop first."""
    ra, rb = ({r.id: r for r in store.records(run.run_id)} for run in (a, b))
    rows = []
    for item, y in rb.items():
        for metric in REGRESSION_METRICS:
            va, vb = m.item_value(ra[item], metric), m.item_value(y, metric)
            if va is not None and vb is not None and va != vb:
                rows.append((item, metric, round(vb - va, 3), va, vb))
    return sorted(rows, key=lambda r: (r[2], r[0], r[1]))


def _table(store, run_id) -> dict[str, list]:
    data = json.loads(store.read_text(run_id, REGRESSIONS_TABLE))
    return {c: [row[i] for row in data["data"]] for i, c in enumerate(data["columns"])}


def test_the_challengers_eval_run_keeps_a_regressions_table_against_the_champion(story):
    _, store, runs, _ = story
    v5, v3 = store.run_summary(runs["v5"].run_id), store.run_summary(runs["v3"].run_id)
    table = _table(store, v3.run_id)
    assert list(table) == [
        "item", "metric", "Δ", "v5 score", "v3 score", "v5 reason", "v3 reason", "type", "v5 trace", "v3 trace",
        "question", "v5 first failing node", "v3 first failing node",
    ]  # fmt: skip
    found = list(zip(table["item"], table["metric"], table["Δ"], table["v5 score"], table["v3 score"], strict=True))
    assert found == _expected_regressions(store, v5, v3) and found[0][:3] == ("d1", "correctness", -1.0)
    by_id = {r.id: r for r in store.records(v3.run_id)}, {r.id: r for r in store.records(v5.run_id)}
    first = table["item"].index("d1")
    assert table["v3 reason"][first] == by_id[0]["d1"].judges["correctness"].reason
    assert table["v5 reason"][first] == by_id[1]["d1"].judges["correctness"].reason
    assert table["v3 first failing node"][first] == by_id[0]["d1"].first_failing
    [trace] = item_traces(store, v3.run_id)["d1"]
    assert table["v3 trace"][first] == f"#/experiments/{store.experiment_id}/traces/{trace.trace_id}"
    logged = json.loads(store.client.get_run(v3.run_id).data.tags["mlflow.loggedArtifacts"])
    assert {"path": REGRESSIONS_TABLE, "type": "table"} in logged  # what makes the UI render it as a table
    note = store.description(v3.run_id)
    assert f"/runs/{v3.run_id}/artifacts/{REGRESSIONS_TABLE})" in note and "worst: d1 correctness 5 → 4 (" in note
    # v1's eval, re-described against v5, has its table replaced (not appended to) with v5 → v1.
    v1_table = _table(store, runs["v1"].run_id)
    assert list(v1_table)[3:5] == ["v5 score", "v1 score"]
    assert len(v1_table["item"]) == len(_expected_regressions(store, v5, store.run_summary(runs["v1"].run_id)))


def test_compare_logs_the_regressions_table_and_links_it_first_thing_after_the_figures(story):
    root, store, runs, _ = story
    report = compare("v1", "v5", root=root)
    table = _table(store, report.run_id)
    expected = _expected_regressions(store, report.a, report.b)
    assert list(zip(table["item"], table["metric"], table["Δ"], table["v1 score"], table["v5 score"], strict=True)) == (
        expected
    )
    assert all(table["v1 trace"]) and all(table["v5 trace"])
    note = store.description(report.run_id)
    drops = sum(1 for row in expected if row[2] < 0)
    assert f"**Regressions**: [{drops} item scores dropped, {len(expected) - drops} rose](" in note


def test_regressions_by_hand():
    from ragtrack.evaluation.compare import ItemChange
    from ragtrack.records import ItemRecord, JudgeRecord

    def rec(item, score, reason):
        verdict = JudgeRecord(score, (score - 1) / 4, reason)
        return ItemRecord(item, "A", f"q {item}", [], "", "", [], {}, {"correctness": verdict})

    a, b = [rec("x", 5, "all facts"), rec("y", 2, "wrong")], [rec("x", 3, "half"), rec("y", 4, "right")]
    changes = [ItemChange("y", "A", "q y", "correctness", 2, 4), ItemChange("x", "A", "q x", "correctness", 5, 3)]
    table = regressions("v1", "v2", (a, b), changes, ({"x": "#/t/1"}, {}))
    assert table["item"] == ["x", "y"] and table["Δ"] == [-2, 2]  # the drop first
    assert table["v1 reason"] == ["all facts", "wrong"] and table["v2 reason"] == ["half", "right"]
    assert table["v1 trace"] == ["#/t/1", ""] and table["v2 trace"] == ["", ""]
    assert table["v1 first failing node"] == ["", ""]  # records without node roles


def test_one_versions_traces_are_found_by_the_tag_the_traces_view_filters_on(story):
    """The experiment's quality views mix versions; ``tags.`ragtrack.version` = 'v3'`` picks one."""
    _, store, runs, _ = story
    found = store.client.search_traces(
        locations=[store.experiment_id],
        filter_string=f"tags.`{Tag.VERSION}` = 'v3'",
        include_spans=False,
        max_results=500,
    )
    assert sorted(t.info.tags[Tag.ITEM_ID] for t in found) == sorted(r.id for r in store.records(runs["v3"].run_id))


def test_a_table_written_again_replaces_its_rows_and_is_listed_once(story):
    _, store, runs, _ = story
    run_id = runs["v1"].run_id
    store.write_table(run_id, "scratch.json", {"a": [1, 2]})
    store.write_table(run_id, "scratch.json", {"a": [3]})
    assert json.loads(store.read_text(run_id, "scratch.json"))["data"] == [[3]]
    logged = json.loads(store.client.get_run(run_id).data.tags["mlflow.loggedArtifacts"])
    assert logged.count({"path": "scratch.json", "type": "table"}) == 1


def test_a_headline_is_the_first_line_cut_to_the_tag_tables_width():
    assert Tag.headline("  short\nsecond line") == "short"
    cut = Tag.headline("word " * 40)
    assert len(cut) == Tag.HEADLINE_CHARS and cut.endswith("…") and "\n" not in cut
