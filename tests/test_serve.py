"""``ragtrack serve``: the champion's registered pyfunc behind ``mlflow models serve``, asked over real HTTP on
127.0.0.1; the alias is resolved when the server starts (a moved alias reaches it when it starts again)."""

from __future__ import annotations

import json
import shutil
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from click.testing import CliRunner

from ragtrack.api import evaluate, promote, serve_command
from ragtrack.cli import main
from ragtrack.config import load_config
from ragtrack.tracking.store import open_store

from .conftest import REPO, free_port, server_process

pytestmark = pytest.mark.slow  # `ragtrack serve` started as a server process


@contextmanager
def serving(root, *args: str) -> Iterator[str]:
    """``ragtrack serve`` on a free loopback port until the block ends; yields its /invocations URL."""
    port = free_port()
    command = [sys.executable, "-m", "ragtrack.cli", "--root", str(root), "serve", "--port", str(port), *args]
    with server_process(command, port, "/ping", timeout=180) as url:
        yield f"{url}/invocations"


def ask(url: str, questions: list[str]) -> list[dict]:
    body = json.dumps({"inputs": questions}).encode()
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as reply:
        return json.loads(reply.read())["predictions"]


@pytest.fixture
def champion_project(tmp_path, shipped):
    """v1 evaluated on 8 items and promoted; v2 registered (evaluated on one). The shipped project's index
    cache (content-keyed) is reused, not built again."""
    root = tmp_path / "project"
    for folder in ("pipelines", "golden"):
        shutil.copytree(REPO / folder, root / folder)
    (root / "ragtrack.toml").write_text(f'[project]\ncache_dir = "{shipped[0] / ".ragtrack" / "cache"}"\n')
    v1 = evaluate("v1", root=root, limit=8)
    assert promote("v1", root=root, allow_partial=True).promoted
    evaluate("v2", root=root, limit=1)
    return root, v1


def test_the_champion_answers_over_http_with_its_contexts_and_a_moved_alias_needs_a_restart(champion_project):
    root, v1 = champion_project
    plan = serve_command(root=root)
    assert plan.model_uri == "models:/rag-agent@champion" and (plan.model_version, plan.version) == ("1", "v1")
    assert plan.url.startswith("http://127.0.0.1:5001/") and plan.loopback  # loopback unless asked otherwise
    items = v1.records[:2]
    with serving(root) as url:
        replies = ask(url, [r.question for r in items])
        for reply, record in zip(replies, items, strict=True):
            assert reply["version"] == "v1"
            assert reply["answer"] == record.answer  # the registered agent, as the eval ran it
            assert reply["retrieved_ids"] == record.retrieved_passage_ids
            assert reply["contexts"] == [c.text for c in record.contexts] and reply["contexts"]
            assert reply["context_ids"] == [c.passage_ids for c in record.contexts]
        # An empty question is the caller's mistake: 400 with the reason, not an answer to nothing.
        with pytest.raises(urllib.error.HTTPError) as refused:
            ask(url, ["How many steps?", " "])
        assert refused.value.code == 400
        assert "question 2 of 2 is empty" in json.loads(refused.value.read())["message"]
        # The alias moves while the server runs (as a promote, or a reviewer in the MLflow UI, moves it).
        store = open_store(load_config(root))
        store.set_champion("2")
        assert ask(url, [items[0].question])[0]["version"] == "v1"  # resolved once, when it started
    with serving(root) as url:  # started again: the champion the alias names now
        assert ask(url, [items[0].question])[0]["version"] == "v2"


def test_an_alias_no_version_has_is_refused_before_a_server_starts(champion_project):
    root, _ = champion_project
    result = CliRunner().invoke(main, ["--root", str(root), "serve", "--alias", "canary"])
    assert result.exit_code == 2
    assert "error: no version of rag-agent has the alias 'canary' (set it in the MLflow UI)" in result.output


def test_a_taken_port_is_one_error_line_and_a_failing_exit_before_anything_loads(project):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(main, ["--root", str(project), "serve", "--port", str(port)])
    assert result.exit_code == 2
    assert result.output == (
        f"error: cannot serve on 127.0.0.1:{port}: Address already in use (another server? pick another --port)\n"
    )
