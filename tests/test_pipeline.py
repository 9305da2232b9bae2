"""Chunking provenance, the FAISS/BM25 indexes and the on-disk index cache (real models)."""

import gc
import json
import shutil

from ragtrack.pipeline.chunking import fixed_chunks, parent_child_chunks, parent_groups
from ragtrack.pipeline.index import BM25Index, DenseIndex
from ragtrack.spec import load_spec

from .conftest import REPO, pipeline_agent


def test_fixed_chunks_map_to_the_passages_they_cover(tiny_corpus):
    chunks = fixed_chunks(tiny_corpus, size=120, overlap=20, min_overlap=0.5)
    assert chunks, "the tiny corpus yields chunks"
    for c in chunks:
        doc = tiny_corpus.documents[c.doc_id]
        ((start, end),) = c.spans
        assert doc.text[start:end] == c.text  # spans point at the chunk's own text
        assert c.passage_ids == tuple(tiny_corpus.passages_covering(c.doc_id, c.spans, 0.5))
    covered = {pid for c in chunks for pid in c.passage_ids}
    assert covered == set(tiny_corpus.passages), "every passage is reachable through some chunk"


def test_parent_groups_nest_h3_under_h2(tiny_corpus):
    doc = tiny_corpus.documents["guides/sampler.md"]
    groups = [[p.id.split("#")[1] for p in g] for _, g in parent_groups(doc, 2, 1500)]
    assert groups == [
        ["sampler-guide"],
        ["sampler-guide/steps"],
        ["sampler-guide/guidance/cfg-value", "sampler-guide/guidance/negative-prompt"],
    ]
    children, parents = parent_child_chunks(tiny_corpus, 2, 60, 0, 0.5, 1500)
    assert all(ch.parent_id in parents for ch in children)
    guidance = next(p for p in parents.values() if "cfg-value" in " ".join(p.passage_ids))
    assert len(guidance.passage_ids) == 2


def test_dense_and_bm25_indexes_find_the_right_chunk(tiny_corpus, embedder):
    chunks = fixed_chunks(tiny_corpus, size=200, overlap=0, min_overlap=0.5)
    dense = DenseIndex.build(chunks, embedder)
    top_id, score = dense.search("What does the cfg value default to?", 1)[0]
    assert "cfg value defaults to 8.0" in dense.chunks[top_id].text and 0 < score <= 1.0001
    bm25 = BM25Index(chunks, "en")
    top = bm25.search("t5xxl_fp8.safetensors", 1)[0][0]
    assert "t5xxl_fp8.safetensors" in dense.chunks[top].text


def test_second_build_is_served_from_cache_without_embedding(project, tiny_corpus, embedder):
    cache = project / ".ragtrack" / "cache"
    before = embedder.texts_embedded
    first = pipeline_agent(project, tiny_corpus, embedder, "v1")
    # Built, not read; its texts may come from the shared embedder's vectors (other tests of this worker
    # embedded the tiny corpus already), so what it encoded is at least nothing new.
    assert not first.index_stats.from_cache and embedder.texts_embedded >= before
    assert first.setup.summary == "index built"
    embedded = embedder.texts_embedded
    second = pipeline_agent(project, tiny_corpus, embedder, "v1")
    assert second.index_stats.from_cache and embedder.texts_embedded == embedded
    assert second.setup.summary == "index from cache"
    assert second.chunks == first.chunks
    # The docstore on disk is JSON (no pickle for FAISS.load_local to unpickle).
    folder = cache / "index" / second.index_stats.key
    assert json.loads((folder / "units.json").read_text())["chunks"]
    assert not list(folder.glob("*.pkl"))


def test_a_build_encodes_its_chunks_and_an_answer_the_sentences_it_retrieved_once(project, tiny_corpus, embedder):
    """Sentences are encoded when a question first retrieves their unit, not at build time, and kept:
    asked again (its query vector forgotten), only the question is encoded."""
    from ragtrack.pipeline.embedding import Embedder
    from ragtrack.pipeline.generate import answer_sentences

    fresh = Embedder(embedder.model_info)  # knows nothing yet, no vector cache
    agent = pipeline_agent(project, tiny_corpus, fresh, "v1")
    assert not agent.index_stats.from_cache
    assert fresh.texts_embedded == len({c.text for c in agent.chunks.values()})  # the dense index's, no more
    folder = project / ".ragtrack" / "cache" / "index" / agent.index_stats.key
    assert sorted(f.name for f in folder.iterdir()) == ["dense.faiss", "units.json"]  # no vectors beside it
    built = fresh.texts_embedded
    question = "What is the default cfg value?"
    out = agent.answer(question)
    # Its sentences, less any that is a whole chunk (encoded for the index already).
    sentences = {s for c in out.contexts for s in answer_sentences(c.text)} - {c.text for c in agent.chunks.values()}
    assert len(sentences) > 4 and question not in sentences
    assert fresh.texts_embedded == built + 1 + len(sentences)
    fresh.forget_recent()  # drops query-time vectors only
    again = agent.answer(question)
    assert fresh.texts_embedded == built + 1 + len(sentences) + 1, "the question alone, encoded again"
    assert again.answer == out.answer


def test_v1_agent_answers_extractively_with_mapped_ids(project, tiny_corpus, embedder):
    agent = pipeline_agent(project, tiny_corpus, embedder, "v1")
    out = agent.answer("What is the default cfg value?")
    assert "guides/sampler.md#sampler-guide/guidance/cfg-value" in out.passage_ids
    assert "8.0" in out.answer
    assert all(s in " ".join(c.text for c in out.contexts) for s in out.answer.split(" ") if s)  # extractive
    assert agent.describe()["generator"].startswith("extractive")


def test_shipped_v1_spec_matches_the_skeleton_contract():
    spec = load_spec("v1", REPO / "pipelines").spec
    assert spec.chunking.strategy == "fixed" and spec.chunking.chunk_size == 500 and spec.chunking.chunk_overlap == 50
    assert spec.retrieval.mode == "dense" and not spec.rerank.enabled


def test_the_lexical_embedder_scores_word_overlap_and_has_nothing_to_forget():
    from ragtrack.pipeline.embedding import LexicalEmbedder

    lexical = LexicalEmbedder()
    q, near, far = lexical.encode(
        ["sampler steps default", "The sampler uses 20 steps by default.", "Tiles save VRAM."]
    )
    assert near @ q > 0.5 and far @ q == 0.0
    lexical.forget_recent()  # the retrieval benchmark calls it on every embedder between retrievers
    assert (lexical.encode(["sampler steps default"])[0] == q).all()


def test_query_vectors_are_kept_for_the_next_run_and_change_no_answer(project, tiny_corpus, monkeypatch):
    """A second run (a new process: its own embedder, its own memory) reads the question's, rewrites'
    and outline points' vectors back instead of encoding them, and answers exactly as the first —
    without ever loading the embedding model. Within one process the model is loaded once."""
    from ragtrack.agent import AgentContext
    from ragtrack.config import load_config
    from ragtrack.pipeline import embedding
    from ragtrack.pipeline.agent import PipelineAgent

    monkeypatch.delenv("RAGTRACK_VECTOR_CACHE", raising=False)  # the project's own cache folder
    monkeypatch.setattr(embedding, "_LOADED", {})  # as a new process: no model loaded yet
    stages: list[str] = []

    def run(question: str = "What is the default cfg value?"):
        ctx = AgentContext(tiny_corpus, load_config(project), on_stage=stages.append)
        agent = PipelineAgent(load_spec("v5", project / "pipelines"), ctx)
        embedded = agent.embedder.texts_embedded
        out = agent.answer(question)
        return out, agent.embedder.texts_embedded - embedded, agent.embedder

    first, encoded, embedder = run()
    assert encoded >= 3, "the question and its two rewrites at least"
    assert embedder.cache.path.parent == project / ".ragtrack" / "cache" / "vectors"
    said = [s for s in stages if s.startswith("loading")]  # (and the index build, once, when not cached)
    assert said == [  # for the index
        "loading the embedding model sentence-transformers/all-MiniLM-L6-v2 (once per process; seconds, or minutes "
        "on a busy machine)"
    ]
    stages.clear()
    again, encoded_again, embedder_again = run()
    assert encoded_again == 0 and not embedder_again.loaded and stages == []
    assert (again.answer, again.passage_ids) == (first.answer, first.passage_ids)
    _, encoded_new, embedder_new = run("How many sampler steps are used by default?")
    assert encoded_new >= 3 and embedder_new.loaded, "new texts: the model is needed"
    assert not [s for s in stages if s.startswith("loading")], "this process has it loaded already: nothing to say"
    assert embedder_new._model is embedder._model


def test_a_damaged_vector_cache_is_reported_and_the_run_goes_on(project, tiny_corpus, caplog, monkeypatch):
    from ragtrack.agent import AgentContext
    from ragtrack.config import load_config
    from ragtrack.pipeline.agent import PipelineAgent
    from ragtrack.pipeline.generate import answer_sentences

    def agent():
        return PipelineAgent(load_spec("v1", project / "pipelines"), AgentContext(tiny_corpus, load_config(project)))

    monkeypatch.delenv("RAGTRACK_VECTOR_CACHE", raising=False)  # damage this project's file, no other
    first = agent()
    expected = first.answer("What is the default cfg value?")
    path = first.embedder.cache.path
    del first
    gc.collect()  # closes its connection, which folds the write-ahead log into the file
    assert path.exists() and not path.with_name(path.name + "-wal").exists()
    path.write_bytes(b"not a database, a crash or a bad copy" * 100)
    second = agent()
    out = second.answer("What is the default cfg value?")
    # Encoded again, not read back: the question and its contexts' sentences (no chunk: the index is cached).
    sentences = {s for c in out.contexts for s in answer_sentences(c.text)}
    assert second.index_stats.from_cache and second.embedder.texts_embedded == 1 + len(sentences)
    assert out.answer == expected.answer
    assert "vector cache" in caplog.text and "encoding without it" in caplog.text


def test_the_vector_cache_is_shared_by_its_readers_and_keeps_the_first_vector(tmp_path):
    import numpy as np

    from ragtrack.pipeline.vector_cache import VectorCache

    path = tmp_path / "vectors" / "model.sqlite"
    one, two = VectorCache(path), VectorCache(path)  # as two processes would open it
    one.put(["a", "b"], np.array([[1, 0, 0], [0, 1, 0]], dtype=np.float32))
    two.put(["b"], np.array([[0, 0, 1]], dtype=np.float32))  # already kept: the first stays
    got = two.get(["a", "b", "c"])
    assert set(got) == {"a", "b"}
    assert got["a"].tolist() == [1, 0, 0] and got["b"].tolist() == [0, 1, 0]
    many = [f"t{i}" for i in range(1200)]  # more texts than one SELECT binds
    one.put(many, np.ones((1200, 3), dtype=np.float32))
    assert len(two.get(many)) == 1200
    three = VectorCache(path)
    three.put(["d"], np.ones((1, 4), dtype=np.float32))  # another width: not this file's model
    assert three.get(["a", "d"]) == {} and VectorCache(path).get(["d"]) == {}


def test_the_vector_cache_is_bounded_and_drops_the_least_recently_used_first(tmp_path, monkeypatch):
    """A fake clock: which vector was used when is what eviction orders by."""
    import numpy as np

    from ragtrack.pipeline import vector_cache

    now = [1_000_000.0]
    monkeypatch.setattr(vector_cache.time, "time", lambda: now[0])
    row = 4 * 8 + 48  # the size the cache counts per vector of 8 floats
    cache = vector_cache.VectorCache(tmp_path / "m.sqlite", max_bytes=10 * row)
    old, middle, new = ([f"{name}{i}" for i in range(4)] for name in ("old", "middle", "new"))
    cache.put(old, np.ones((4, 8), dtype=np.float32))
    now[0] += 10
    cache.put(middle, np.ones((4, 8), dtype=np.float32))
    now[0] += vector_cache.MARK_EVERY_S + 1
    assert len(cache.get(old)) == 4  # read again: now the most recently used
    cache.put(new, np.ones((4, 8), dtype=np.float32))  # 12 vectors > 10: down to 9
    kept = cache.get(old + middle + new)
    assert len(kept) == 9 and set(old + new) <= set(kept)


def test_the_model_identity_is_its_bytes_and_is_remembered(tmp_path):
    from ragtrack.pipeline.vector_cache import _identity, model_identity

    model = tmp_path / "model"
    (model / "1_Pooling").mkdir(parents=True)
    (model / "config.json").write_text('{"dim": 3}')
    (model / "1_Pooling" / "config.json").write_text("{}")
    memo = tmp_path / "memo"
    first = model_identity("m", str(model), memo)
    [remembered] = memo.iterdir()
    assert remembered.read_text() == first
    copy = tmp_path / "copy"
    shutil.copytree(model, copy)
    assert model_identity("m", str(copy), memo) == first, "the same bytes elsewhere: the same vectors"
    assert model_identity("other", str(model), memo) != first
    (copy / "1_Pooling" / "config.json").write_text("{} ")
    assert model_identity("m", str(copy), memo) != first
    assert len(list(memo.iterdir())) == 4  # each remembered, under its files' names, sizes and times
    _identity.cache_clear()
    remembered.write_text("not a hash")
    assert model_identity("m", str(model), memo) == first and remembered.read_text() == first  # hashed again


def test_a_build_after_another_chunking_encodes_only_the_texts_it_did_not(project, tiny_corpus, monkeypatch):
    """v3 built after v1 (each as a new process would: its own embedder) encodes only what v1 did
    not, and so does its answer (read back from the shared vector cache); the texts each needs are
    counted from their indexes and contexts, independently of the cache."""
    from ragtrack.agent import AgentContext
    from ragtrack.caches import cache_path
    from ragtrack.config import load_config
    from ragtrack.pipeline.agent import PipelineAgent
    from ragtrack.pipeline.generate import answer_sentences

    shared = project.parent / "shared-vectors"
    monkeypatch.setenv("RAGTRACK_VECTOR_CACHE", str(shared))

    question = "What is the default cfg value?"

    def build(version):
        ctx = AgentContext(tiny_corpus, load_config(project))
        agent = PipelineAgent(load_spec(version, project / "pipelines"), ctx)
        return agent, {c.text for c in agent.chunks.values()}

    def answer(agent):
        embedded = agent.embedder.texts_embedded
        out = agent.answer(question)
        return agent.embedder.texts_embedded - embedded, {s for c in out.contexts for s in answer_sentences(c.text)}

    v1, v1_texts = build("v1")
    assert v1.embedder.cache.path.parent == shared == cache_path(project / ".ragtrack" / "cache", "vectors")
    assert v1.embedder.texts_embedded == len(v1_texts)
    v1_encoded, v1_sentences = answer(v1)
    assert v1_encoded == 1 + len(v1_sentences - v1_texts)  # the question and its contexts' sentences
    v3, v3_texts = build("v3")
    assert v3.index_stats.from_cache is False and 0 < len(v3_texts - v1_texts) < len(v3_texts)
    assert v3.embedder.texts_embedded == len(v3_texts - v1_texts)
    v3_encoded, v3_sentences = answer(v3)  # its parents' sentences: all among v1's contexts' on this corpus
    assert v3_sentences and v3_encoded == len(v3_sentences - v1_sentences - v1_texts - v3_texts - {question}) == 0
    from ragtrack.api import cache_entries

    assert [e.path for e in cache_entries(root=project, kinds=["vectors"])] == [v1.embedder.cache.path]


def test_offline_answers_to_chinese_questions_read_as_chinese():
    """Their sentences were joined with spaces (three command lines ran into one statement) and, when
    nothing fitted, they said so in English."""
    from ragtrack.pipeline.embedding import LexicalEmbedder
    from ragtrack.pipeline.generate import NO_ANSWER, AnswerInput, AnswerStep
    from ragtrack.text import join_sentences

    step = AnswerStep("answer", embedder=LexicalEmbedder(), max_sentences=4)
    context = "升级命令如下：\nqhtool discover\nqhtool verify fw.qfw\n升级完成后网关自动重启"
    answer = step.offline(AnswerInput("怎样用 qhtool 升级网关固件？", (context,)))
    assert answer == "升级命令如下：qhtool discover\nqhtool verify fw.qfw\n升级完成后网关自动重启。"
    assert step.offline(AnswerInput("网关支持哪些协议？", ())) == NO_ANSWER["zh"] == "检索到的内容回答不了这个问题。"
    assert step.offline(AnswerInput("Which protocols?", ())) == NO_ANSWER["en"]
    assert join_sentences(["The gateway restarts.", "It keeps its settings."], "en") == (
        "The gateway restarts. It keeps its settings."
    )


def test_offline_answers_take_a_qa_pairs_answer_never_its_question():
    """v2's units read "Q: … A: …": its answers were mostly its own generated questions (the sentences
    closest to the user's question), and a list item ran into the next sentence."""
    from ragtrack.pipeline.embedding import LexicalEmbedder
    from ragtrack.pipeline.generate import AnswerInput, AnswerStep, answer_sentences
    from ragtrack.pipeline.qa_pairs import qa_text

    pair = qa_text("What should I know about steps?", "Suggested settings: `steps`: 4\nThe default of 20 is enough.")
    assert answer_sentences(pair) == ["Suggested settings: `steps`: 4", "The default of 20 is enough."]
    assert answer_sentences("Q: not a pair's layout") == ["Q: not a pair's layout"]  # other text as it is
    step = AnswerStep("answer", embedder=LexicalEmbedder(), max_sentences=4)
    answer = step.offline(AnswerInput("What should I know about steps?", (pair,)))
    assert answer == "Suggested settings: `steps`: 4\nThe default of 20 is enough."
