"""The stock MLflow UI shows what ragtrack logged: runs of two versions with their metrics, and the alias.

Starts ``mlflow ui`` on 127.0.0.1 over the test project's store and drives
Debian's headless Chromium with Playwright. Screenshots are kept under
``test-artifacts/``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ragtrack.api import evaluate, promote
from ragtrack.config import load_config
from ragtrack.tracking.store import open_store

from .conftest import REPO, make_project

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = REPO / "test-artifacts"

pytestmark = pytest.mark.browser

if not Path(CHROMIUM).exists() and not os.environ.get("CI"):
    pytest.skip("Debian's chromium is not installed (.ci/run installs it)", allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    root = make_project(tmp_path_factory.mktemp("ui") / "project")
    v1 = evaluate("v1", root=root)
    v3 = evaluate("v3", root=root)
    assert promote("v1", root=root).promoted
    store = open_store(load_config(root))
    db = Path(store.tracking_uri.removeprefix("sqlite:///"))
    port = _free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "ui",
            "--backend-store-uri",
            store.tracking_uri,
            "--default-artifact-root",
            (db.parent / "artifacts").as_uri(),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            if urllib.request.urlopen(f"{base}/health", timeout=2).read() == b"OK":
                break
        except OSError:
            pass
        if time.monotonic() > deadline or server.poll() is not None:
            server.kill()
            pytest.fail("the MLflow UI did not come up")
        time.sleep(0.5)
    yield base, store, v1, v3
    server.terminate()
    server.wait(timeout=20)


@pytest.fixture(scope="module")
def page():
    from playwright.sync_api import sync_playwright

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
        yield browser.new_page(viewport={"width": 1600, "height": 1100})
        browser.close()


def _text_when(page, needles: list[str], timeout_s: float = 60) -> str:
    deadline = time.monotonic() + timeout_s
    while True:
        text = page.inner_text("body")
        if all(n in text for n in needles) or time.monotonic() > deadline:
            return text
        time.sleep(0.5)


def test_experiment_page_lists_both_versions_with_their_metrics(ui, page):
    base, store, v1, v3 = ui
    ARTIFACTS.mkdir(exist_ok=True)
    page.goto(f"{base}/#/experiments/{store.experiment_id}/runs?compareRunsMode=CHART")
    _text_when(page, ["eval v1", "eval v3", "Search metric charts"])
    # Charts render lazily: filter to one metric so its values are on screen.
    page.get_by_placeholder("Search metric charts").fill("context_recall")
    recall = [f"{r.metrics['context_recall']:.2f}" for r in (v1, v3)]
    text = _text_when(page, ["eval v1", "eval v3", "context_recall", *recall])
    page.screenshot(path=str(ARTIFACTS / "mlflow-experiment.png"))
    assert "eval v1" in text and "eval v3" in text
    assert "context_recall" in text
    for value in recall:
        assert value in text, f"context_recall value {value} not shown"


def test_model_page_shows_the_champion_alias(ui, page):
    base, store, v1, _ = ui
    page.goto(f"{base}/#/models/{store.registered_model}")
    text = _text_when(page, ["champion", f"Version {v1.model_version}"])
    page.screenshot(path=str(ARTIFACTS / "mlflow-model.png"))
    assert "champion" in text and "ragtrack.version" in text


def test_run_page_shows_per_item_evaluation_records(ui, page):
    base, store, _, v3 = ui
    page.goto(f"{base}/#/experiments/{store.experiment_id}/evaluation-runs")
    _text_when(page, ["eval v3"])
    page.get_by_text("eval v3", exact=True).first.click()
    text = _text_when(page, ["What is the default cfg value?", "correctness"], timeout_s=60)
    page.screenshot(path=str(ARTIFACTS / "mlflow-evaluation.png"))
    assert "What is the default cfg value?" in text and "correctness" in text
