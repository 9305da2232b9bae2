"""The stock MLflow UI tells the story ragtrack logged, read back in headless Chromium.

Starts ``mlflow ui`` on 127.0.0.1 over a project's store with two evaluated versions and a promotion, drives
Debian's Chromium with Playwright and checks what a person would look for: which version is champion and
why, by how much the other version differs (overall and per type, with its interval), and what one item's
answer, retrieved passages and judge reasons were. Screenshots are kept under ``test-artifacts/``.

By default the project is a fresh tiny one (v1 promoted, then v3 refused). ``RAGTRACK_UI_PROJECT=<folder>``
points the same checks at an existing project instead — the README's screenshots (``docs/images/``) come from
the README session's project (v1 and v5 on the shipped golden set).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from ragtrack.api import compare, evaluate, promote
from ragtrack.config import load_config
from ragtrack.tracking.store import Tag, open_store

from .conftest import REPO, make_project, mlflow_process

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = REPO / "test-artifacts"
GAP = "\u00a0" * 3  # description tables space their cells with no-break spaces

pytestmark = pytest.mark.browser

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
        assert promote("v1", root=root).promoted
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
    interval = f"[{c.ci_low:+.3f}, {c.ci_high:+.3f}]"
    page.goto(f"{base}/#/experiments/{store.experiment_id}/runs/{challenger.run_id}")
    text = _text_when(page, [f"Against champion {champion.version}", interval])
    assert f"correctness Δ {c.delta:+.3f} (95% CI {interval}" in text  # on the first, always visible lines
    page.get_by_text("Show more", exact=True).first.click()
    text = _text_when(page, ["Scores (judges 1–5, retrieval 0–1)", "Diagnosis"])
    # The summary table, overall and per type, and the paired comparison per type with its interval.
    assert f"correctness (1–5){GAP}{challenger.metrics['correctness']:.2f}" in text.replace("\t", "")
    for t in ("A", "B", "C", "D"):
        d = rows[("correctness", t)]
        assert f"↳ type {t}" in text and f"[{d.ci_low:+.3f}, {d.ci_high:+.3f}]" in text
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
