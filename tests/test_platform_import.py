"""``ragtrack corpus import dify|ragflow``: a knowledge base over the platform's dataset API → a corpus
JSONL (one passage per segment, one document per platform document) plus the ID table; a re-import
reports what changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ragtrack.agents import dify
from ragtrack.cli import main
from ragtrack.corpus import load_corpus
from ragtrack.testing.dify_server import DifyServer
from ragtrack.testing.ragflow_server import RagflowServer

DATASET_KEY = "dataset-import-5f4e3d2c1b0a"


def run(project: Path, *args: str):
    return CliRunner().invoke(main, ["--root", str(project), "corpus", "import", *args], catch_exceptions=False)


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv("KB_KEY", DATASET_KEY)


def test_dify_import_writes_passages_documents_and_the_id_table(project, key, monkeypatch):
    monkeypatch.setattr(dify, "PAGE_SIZE", 2)  # several pages of documents and of segments
    with DifyServer(project / "golden" / "kb", dataset_key=DATASET_KEY, max_chars=60) as server:
        # Named twice, by name and by ID: imported once (it was imported twice, under other IDs).
        twice = ("--dataset", "kb", "--dataset", server.dataset_id)
        result = run(project, "dify", "--base-url", server.base_url, "--api-key-env", "KB_KEY", *twice)
    assert result.exit_code == 0, result.output
    assert "write the golden set against these passage IDs" in result.output
    segments = server.knowledge.segments
    corpus = load_corpus(project / "golden" / "dify-kb.jsonl")
    # One passage per segment with text, ID <document name>#<position>; one document per platform document.
    assert sorted(corpus.passages) == sorted(f"{s.document.name}#{s.position}" for s in segments)
    assert sorted(corpus.documents) == ["guides/models.md", "guides/sampler.md", "notes.txt"]
    assert corpus.passages["guides/sampler.md#4"].text == "The steps setting defaults to 20."  # cut at a sentence
    table = json.loads((project / "golden" / "dify-kb.ids.json").read_text())
    assert table["segments"] == {s.id: [f"{s.document.name}#{s.position}"] for s in segments}
    assert table["datasets"] == [{"id": server.dataset_id, "name": "kb"}] and table["platform"] == "dify"
    pages = [x.request.query.get("page") for x in server.exchanges if x.request.path.endswith("/segments")]
    assert pages.count("2") >= 2, "paged with limit 2, past Dify's has_more quirk"
    assert all(x.request.headers["authorization"] == f"Bearer {DATASET_KEY}" for x in server.exchanges)


def test_a_reimport_reports_passages_added_removed_and_changed(project, key):
    kb = project / "golden" / "kb"
    with DifyServer(kb, dataset_key=DATASET_KEY, max_chars=200) as server:
        assert (
            run(project, "dify", "--base-url", server.base_url, "--api-key-env", "KB_KEY", "--dataset", "kb").exit_code
            == 0
        )
    sampler = kb / "guides" / "sampler.md"
    sampler.write_text(sampler.read_text().replace("defaults to 8.0", "defaults to 7.0"))
    (kb / "notes.txt").unlink()
    (kb / "guides" / "vae.md").write_text("# VAE\n\nThe VAE decodes latents into pixels.\n")
    with DifyServer(kb, dataset_key=DATASET_KEY, max_chars=200) as server:
        result = run(
            project, "dify", "--base-url", server.base_url, "--api-key-env", "KB_KEY", "--dataset", server.dataset_id
        )
    assert result.exit_code == 0, result.output
    assert "since the last import: 1 added, 1 removed, 1 changed" in result.output
    assert "added: guides/vae.md#1" in result.output and "removed: notes.txt#1" in result.output
    assert "changed: guides/sampler.md#2" in result.output


def test_ragflow_import(project, key):
    with RagflowServer(project / "golden" / "kb", api_key=DATASET_KEY, max_chars=300) as server:
        result = run(
            project,
            "ragflow",
            "--base-url",
            server.base_url,
            "--api-key-env",
            "KB_KEY",
            "--dataset",
            "kb",
            "--out",
            "golden/rf.jsonl",
        )
    assert result.exit_code == 0, result.output
    corpus = load_corpus(project / "golden" / "rf.jsonl")
    assert sorted(corpus.passages) == sorted(f"{s.document.name}#{s.position}" for s in server.knowledge.segments)
    assert corpus.passages["guides/sampler.md#2"].text.startswith("A negative prompt")
    table = json.loads((project / "golden" / "rf.ids.json").read_text())
    assert len(table["segments"]) == len(server.knowledge.segments) and table["platform"] == "ragflow"


def test_import_errors_are_one_line(project, key, monkeypatch):
    with DifyServer(project / "golden" / "kb", dataset_key=DATASET_KEY) as server:
        result = run(project, "dify", "--base-url", server.base_url, "--api-key-env", "KB_KEY", "--dataset", "wiki")
        assert (
            result.exit_code == 2
            and f"knowledge base 'wiki' not found; available: kb ({server.dataset_id})" in result.output
        )
        monkeypatch.setenv("KB_KEY", "dataset-wrong-key-000000")
        result = run(project, "dify", "--base-url", server.base_url, "--api-key-env", "KB_KEY", "--dataset", "kb")
        assert result.exit_code == 2 and "401 unauthorized: Access token is invalid" in result.output
        assert "needs a knowledge-base API key, dataset-" in result.output
        no_v1 = server.base_url.removesuffix("/v1")
        monkeypatch.setenv("KB_KEY", DATASET_KEY)
        result = run(project, "dify", "--base-url", no_v1, "--api-key-env", "KB_KEY", "--dataset", "kb")
        assert result.exit_code == 2 and "is --base-url missing it?" in result.output, result.output
    result = run(project, "maxkb", "--base-url", "http://127.0.0.1:9/v1", "--api-key-env", "KB_KEY", "--dataset", "kb")
    assert result.exit_code == 2 and "unknown platform 'maxkb'; expected one of: dify, ragflow" in result.output
    result = run(project, "coze", "--base-url", "http://127.0.0.1:9/v1", "--api-key-env", "KB_KEY", "--dataset", "kb")
    assert result.exit_code == 2 and "Coze lists no segment IDs to import" in result.output  # a kind, no import
    result = run(project, "dify", "--base-url", "http://127.0.0.1:9/v1", "--api-key-env", "NOPE_KEY", "--dataset", "kb")
    assert result.exit_code == 2 and "environment variable NOPE_KEY is not set" in result.output
    assert "Traceback" not in result.output
    pasted = "dataset-pasted-by-mistake-7f3a9"  # the key where its variable's name belongs: refused, not echoed
    result = run(project, "dify", "--base-url", "http://127.0.0.1:9/v1", "--api-key-env", pasted, "--dataset", "kb")
    assert result.exit_code == 2 and "--api-key-env must name an environment variable" in result.output
    assert pasted not in result.output
