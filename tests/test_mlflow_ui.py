"""The stock MLflow UI tells the story ragtrack logged, read back in headless Chromium.

Starts ``mlflow ui`` on 127.0.0.1 over a project's store with two evaluated versions and a promotion, drives
Debian's Chromium with Playwright and checks what a person would look for: which version is champion and
why, by how much the other version differs (overall and per type, with its interval), and what one item's
answer, retrieved passages and judge reasons were. Screenshots are kept under ``test-artifacts/``.

By default the project is a fresh tiny one that went through what a reviewer reads after: ``eval v1``,
``eval v5``, ``promote v1``, ``promote v5`` with overrides (``--allow-substitutes``: no reranker offline; a
margin below 0, as v5 only ties v1 on five items), ``eval v3``, ``promote v3`` (refused). The checks then
read every page that states a standing, the decisions with their overrides, the regressions table and the
run page's first screen. ``RAGTRACK_UI_PROJECT=<folder>`` points the same checks at an existing project
instead — the README's screenshots (``docs/images/``) come from the README session's project (v1 and v5 on
the shipped golden set).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from ragtrack.api import compare, evaluate, promote
from ragtrack.config import load_config
from ragtrack.evaluation import metrics as m
from ragtrack.tracking.compare import REGRESSIONS_TABLE
from ragtrack.tracking.promotion import DECISIONS_VIEW
from ragtrack.tracking.store import Tag, open_store

from .conftest import REPO, make_project, mlflow_process

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = REPO / "test-artifacts"
GAP = "\u00a0" * 3  # description tables space their cells with no-break spaces

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # Chromium driving `mlflow ui` in its own process

if not Path(CHROMIUM).exists() and not os.environ.get("CI"):
    pytest.skip("Debian's chromium is not installed (.ci/run installs it)", allow_module_level=True)


@pytest.fixture(scope="module")
def story(tmp_path_factory):
    """(root, store, champion run, challenger run): the champion's eval and the newest eval of another version."""
    given = os.environ.get("RAGTRACK_UI_PROJECT")
    if given:
        root = Path(given)
    else:
        root = make_project(tmp_path_factory.mktemp("ui") / "project")
        evaluate("v1", root=root)
        evaluate("v5", root=root)
        assert promote("v1", root=root).promoted
        assert promote("v5", root=root, allow_substitutes=True, margin=-0.1).promoted
        evaluate("v3", root=root)
        assert not promote("v3", root=root).promoted
    store = open_store(load_config(root))
    champion_mv, champion = store.champion()
    challenger = next(r for r in store.eval_runs() if r.model_version != champion_mv)
    champion_run = store.latest_eval(champion, challenger.golden_digest, challenger.judge_identity)
    if not store.client.get_model_version(store.registered_model, challenger.model_version).description:
        pytest.fail(f"{root}: the newest eval ({challenger.version}) of a non-champion was never put to promote")
    return root, store, champion_run, challenger


@pytest.fixture(scope="module")
def base(story):
    _, store, _, _ = story
    db = Path(store.tracking_uri.removeprefix("sqlite:///"))
    artifacts = (db.parent / "artifacts").as_uri()
    with mlflow_process(
        "ui", "--backend-store-uri", store.tracking_uri, "--default-artifact-root", artifacts, timeout=90
    ) as url:
        yield url


@pytest.fixture(scope="module")
def page():
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        tab = browser.new_page(viewport={"width": 1600, "height": 1000})
        # The UI opens its assistant panel and a feature tip on a first visit; a returning user has closed them.
        tab.add_init_script(
            "for (const key of ['mlflow.assistant.fab.autoOpenedOnFirstLoad', 'mlflow.detectIssues.guidanceShown'])"
            " localStorage.setItem(key + '_v1', 'true');"
        )
        yield tab
        browser.close()


def _flat(text: str) -> str:
    """Whitespace (the UI mixes no-break spaces, tabs and newlines) as single spaces."""
    return " ".join(text.split())


def _text_when(page, needles: list[str], timeout_s: float = 60) -> str:
    """The page's text once every needle shows (compared with whitespace flattened), or at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = page.inner_text("body")
        if all(_flat(n) in _flat(text) for n in needles) or time.monotonic() > deadline:
            return text
        time.sleep(0.5)


def _shot(page, name: str, full_page: bool = False) -> None:
    page.screenshot(path=str(ARTIFACTS / name), full_page=full_page)


def test_the_experiment_opens_on_the_champion_and_a_leaderboard_with_key_metrics_first(story, base, page):
    _, store, champion, challenger = story
    page.goto(f"{base}/#/experiments/{store.experiment_id}/evaluation-runs")
    text = _text_when(page, [f"Champion: {champion.version}", f"eval {challenger.version}"])
    assert f"Champion: {champion.version} since " in text
    page.locator('[data-component-id="mlflow.experiment.metadata_editor.expand_button"]').first.click()
    text = _text_when(page, [f"{challenger.version}\n", "Δ correctness vs champion"])
    assert "Δ correctness vs champion" in text and f"{champion.version} ★" in text
    headers = [h.strip() for h in page.locator("[role=columnheader]").all_inner_texts() if h.strip()]
    assert headers[headers.index("Dataset") + 1 :][:4] == ["correctness", "groundedness", "context_recall", "mrr"]
    _shot(page, "mlflow-experiment.png")


def test_the_run_overview_shows_the_summary_table_and_the_interval_against_the_champion(story, base, page):
    root, store, champion, challenger = story
    rows = {
        (r.metric, r.scope): r.diff for r in compare(champion.version, challenger.version, root=root, log=False).rows
    }
    c = rows[("correctness", "all")]
    interval = c.interval_text()
    page.goto(f"{base}/#/experiments/{store.experiment_id}/runs/{challenger.run_id}")
    text = _text_when(page, [f"Against champion {champion.version}", interval])
    assert f"correctness Δ {c.delta:+.3f} (95% CI {interval}" in text  # on the first, always visible lines
    page.get_by_text("Show more", exact=True).first.click()
    text = _text_when(page, ["Scores (judges 1–5, retrieval 0–1)", "Diagnosis"])
    # The summary table, overall and per type, and the paired comparison per type with its interval.
    assert f"correctness (1–5){GAP}{challenger.metrics['correctness']:.2f}" in text.replace("\t", "")
    for t in ("A", "B", "C", "D"):
        d = rows[("correctness", t)]
        assert f"↳ type {t}" in text and d.interval_text() in text  # or why there is none (one cluster)
    assert f"ragtrack promote {challenger.version} would " in text
    _shot(page, "mlflow-run-overview.png")


def test_the_evaluation_view_shows_a_numeric_judge_mean_and_an_items_judge_reasons(story, base, page):
    _, store, _, challenger = story
    record = store.records(challenger.run_id)[0]
    [trace] = store.client.search_traces(
        locations=[store.experiment_id],
        run_id=challenger.run_id,
        filter_string=f"tags.`{Tag.ITEM_ID}` = '{record.id}'",
        include_spans=False,
    )
    page.goto(f"{base}/#/experiments/{store.experiment_id}/runs/{challenger.run_id}/traces")
    mean = f"{challenger.metrics['correctness']:.2f}".rstrip("0").rstrip(".")
    text = _text_when(page, ["correctness", "AVG", f'"item_id": "{record.id}"'])
    assert f"correctness\nAVG\n{mean}\n" in text  # a numeric mean per judge, not a distribution of strings
    _shot(page, "mlflow-evaluation.png")

    search = page.get_by_placeholder("Search traces by id, request, or response")
    search.fill(trace.info.trace_id)  # the table shows the rows in view only; find the item's
    search.press("Enter")
    page.get_by_text(trace.info.trace_id[:12]).first.click()
    _text_when(page, ["retrieve", "generate"])
    page.locator('button:has-text("Assess")').first.click()
    page.locator('[data-component-id="shared.model-trace-explorer.toggle-assessment-expanded"]').first.click()
    text = _text_when(page, [record.judges["correctness"].reason])
    assert record.judges["correctness"].reason in text and record.answer.split("\n")[0][:60] in text
    _shot(page, "mlflow-trace.png")

    page.get_by_text("retrieve", exact=True).first.click()  # the RETRIEVER span: documents with their passages
    first = record.contexts[0]
    text = _text_when(page, [first.passage_ids[0]])
    assert first.passage_ids[0] in text


def test_the_model_version_pages_say_why_one_is_champion_and_the_other_is_not(story, base, page):
    _, store, champion, challenger = story
    page.goto(f"{base}/#/models/{store.registered_model}/versions/{champion.model_version}")
    text = _flat(_text_when(page, [f"{champion.version} is the champion since", "@ champion"]))
    assert f"{champion.version} is the champion since" in text and "@ champion" in text  # and the alias
    page.goto(f"{base}/#/models/{store.registered_model}/versions/{challenger.model_version}")
    described = store.client.get_model_version(store.registered_model, challenger.model_version).description
    reason = next(line for line in described.splitlines() if line.startswith(("- why: ", "- refused because: ")))
    text = _text_when(page, [f"{challenger.version} is not the champion", reason[2:40]])
    assert reason[2:].split(" (")[0] in text and "rule: correctness > champion" in text
    _shot(page, "mlflow-model-version.png")


def test_a_logged_model_links_the_eval_run_that_measured_it(story, base, page):
    _, store, _, challenger = story
    model_id = store.client.get_run(challenger.run_id).data.tags[Tag.MODEL_ID]
    page.goto(f"{base}/#/experiments/{store.experiment_id}/models/{model_id}")
    _text_when(page, ["Eval runs of this agent version", challenger.run_id[:8]])
    href = page.locator(f'a[href="#/runs/{challenger.run_id}"]').first.get_attribute("href")
    _shot(page, "mlflow-logged-model.png")
    page.goto(f"{base}/{href}")  # the UI's own route to the run, whatever its experiment
    text = _text_when(page, [f"eval {challenger.version}", challenger.run_id])
    assert f"eval {challenger.version}" in text and challenger.run_id in text


# The rows of a table the UI draws with ARIA roles, as far as they show on the first screen: inside the
# viewport and inside the box that scrolls them.
_VISIBLE_ROWS = """(header) => {
  const table = [...document.querySelectorAll('[role=table]')].find(t => t.innerText.includes(header));
  if (!table) return null;
  let box = table, bottom = window.innerHeight;
  while ((box = box.parentElement)) {
    if (['auto', 'scroll', 'hidden'].includes(getComputedStyle(box).overflowY)) {
      bottom = Math.min(bottom, box.getBoundingClientRect().bottom);
    }
  }
  return [...table.querySelectorAll('[role=row]')]
    .filter(r => r.getBoundingClientRect().bottom <= bottom && r.querySelector('[role=cell]'))
    .map(r => [...r.querySelectorAll('[role=cell]')].map(c => c.innerText.trim()));
}"""

# Each table row of the registry's tags against the height of the box that scrolls them: a row taller than
# half its box is a value wrapped past reading (the clipped row the issue saw).
_TALL_ROWS = """() => [...document.querySelectorAll('tr')].filter(tr => {
  let box = tr.parentElement;
  while (box && !['auto', 'scroll'].includes(getComputedStyle(box).overflowY)) box = box.parentElement;
  return box && tr.getBoundingClientRect().height > box.getBoundingClientRect().height / 2;
}).map(tr => tr.innerText)"""


def test_the_champions_eval_run_says_so_and_its_first_screen_shows_primary_metrics_to_three_decimals(story, base, page):
    _, store, champion, _ = story
    page.goto(f"{base}/#/experiments/{store.experiment_id}/runs/{champion.run_id}")
    text = _text_when(page, [f"This model version is the champion ({champion.version}).", "Metrics ("])
    assert "Against champion" not in text.split("Show more")[0]  # not the champion it was compared with before
    rows = page.evaluate(_VISIBLE_ROWS, "Metric")
    assert rows and len(rows) >= len(m.CORE), rows
    for name, value, *_ in rows:  # a primary mean, overall or of one type; every secondary one has a prefix
        assert re.fullmatch(r"[a-z_]+(/type_[A-D])?", name), f"{name} on the first screen is not a primary metric"
        assert re.fullmatch(r"-?\d+(\.\d{1,3})?", value), (name, value)
    _shot(page, "mlflow-champion-run.png")
    # A stage the run skipped says so where its params are listed (and where charts read them).
    params = store.client.get_run(champion.run_id).data.params
    if params.get("rerank_model") == "none":
        page.get_by_placeholder("Search parameters").fill("spec.rerank.model")
        text = _flat(_text_when(page, [f"spec.rerank.model {params['spec.rerank.model']}"]))
        assert f"spec.rerank.model skipped ({params['rerank_model_requested']} not available)" in text


def test_every_page_names_the_current_champion(story, base, page):
    _, store, champion, challenger = story
    pages = [f"#/experiments/{store.experiment_id}/runs/{r.run_id}" for r in store.eval_runs()]
    pages += [f"#/models/{store.registered_model}/versions/{mv.version}" for mv in store.model_versions()]
    pages.append(f"#/models/{store.registered_model}")
    now = f"{champion.version} (model version {champion.model_version})"
    for route in pages:
        page.goto("about:blank")
        page.goto(f"{base}/{route}")
        text = _flat(_text_when(page, ["champion"]))
        assert "champion" in text, route
        others = {mv.tags.get(Tag.VERSION) for mv in store.model_versions()} - {champion.version}
        for other in others:
            assert f"Against champion {other}:" not in text and f"{other} is the champion" not in text, route
            assert f"Champion: {other} " not in text, route
        assert now in text or f"{champion.version} is the champion" in text or f"champion ({champion.version})" in text


def test_the_decisions_show_their_outcome_and_overrides_as_columns_and_on_the_first_line(story, base, page):
    _, store, _, _ = story
    decisions = [r for r in store.client.search_runs([store.decisions_experiment_id]) if r.data.tags.get(Tag.OUTCOME)]
    page.goto(f"{base}/#/experiments/{store.decisions_experiment_id}/runs?viewStateShareKey={DECISIONS_VIEW}")
    text = _text_when(page, [r.info.run_name for r in decisions] + [Tag.OUTCOME, Tag.OVERRIDES])
    for r in decisions:
        assert r.info.run_name in text
    headers = [h.strip() for h in page.locator("[role=columnheader]").all_inner_texts() if h.strip()]
    assert headers.index(Tag.OUTCOME) < headers.index(Tag.OVERRIDES), headers
    _shot(page, "mlflow-decisions.png")
    overridden = [r for r in decisions if r.data.tags.get(Tag.OVERRIDES, Tag.NONE) != Tag.NONE]
    if not overridden:
        pytest.skip("no decision of this project overrode the rule")
    run = overridden[0]
    page.goto(f"{base}/#/experiments/{store.decisions_experiment_id}/runs/{run.info.run_id}")
    first = run.data.tags[Tag.NOTE].splitlines()[0].replace("**", "").replace("`", "")
    text = _text_when(page, [first])
    assert first in _flat(text) and "overrides: --allow-" in first  # on the line shown before "Show more"


def test_the_regressions_table_shows_both_versions_scores_and_reasons_side_by_side(story, base, page):
    _, store, champion, challenger = story
    data = json.loads(store.read_text(challenger.run_id, REGRESSIONS_TABLE))
    rows = [dict(zip(data["columns"], row, strict=True)) for row in data["data"]]
    worst = rows[0]
    a, b = champion.version, challenger.version
    page.goto("about:blank")  # the artifact view keeps the listing of the run it showed last
    page.goto(f"{base}/#/experiments/{store.experiment_id}/runs/{challenger.run_id}/artifacts/{REGRESSIONS_TABLE}")
    text = _text_when(page, [f"{a} reason", f"{b} reason", worst[f"{a} reason"], worst[f"{b} reason"]])
    for column in ("item", "Δ", f"{a} score", f"{b} score", f"{a} reason", f"{b} reason"):
        assert column in text
    assert worst[f"{a} reason"] in text and worst[f"{b} reason"] in text
    header = page.get_by_text(f"{a} reason", exact=True).first.bounding_box()
    assert header and header["x"] + header["width"] <= 1600, "the first reason column shows without scrolling"
    _shot(page, "mlflow-regressions.png")

    page.goto(f"{base}/{worst[f'{b} trace']}")  # its trace, from the table's link
    trace_id = worst[f"{b} trace"].rsplit("/", 1)[1]
    text = _text_when(page, [f"Trace {trace_id.removeprefix('tr-')[:8]}", worst["question"]])
    assert worst["question"] in text and trace_id.removeprefix("tr-")[:8] in text


def test_model_version_tags_are_short_enough_to_read_in_their_table(story, base, page):
    _, store, champion, _ = story
    page.goto(f"{base}/#/models/{store.registered_model}/versions/{champion.model_version}")
    decision = store.client.get_model_version(store.registered_model, champion.model_version).tags[Tag.DECISION]
    text = _flat(_text_when(page, [Tag.DECISION, decision]))
    assert f"{Tag.DECISION} {decision}" in text
    assert page.evaluate(_TALL_ROWS) == []
    _shot(page, "mlflow-model-version-tags.png")
