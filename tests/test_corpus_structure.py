"""Heading detection on documents shaped like the ones users paste in: Chinese articles copied from blogs
as ``.txt`` (numbered headings, unfenced code with stray ``#`` comments, quoted prompt templates), one-line
articles, plain-text headings, Markdown. Each expected tree below is written by hand from the fixture."""

import os
from pathlib import Path

import pytest

from ragtrack.corpus import MIN_PASSAGE_CHARS, MIN_SECTION_CHARS, load_corpus, split_document

DATA = Path(__file__).parent / "data" / "structure"
# CI keeps ../shared beside the clone; RAGTRACK_SHARED points elsewhere.
SHARED = Path(os.environ.get("RAGTRACK_SHARED", Path(__file__).parents[2] / "shared"))
SEEDS = SHARED / "seeds"
CMRC = SHARED / "benchmarks" / "cmrc2018_zh" / "normalized" / "dev" / "corpus.jsonl"

CODE_ARTICLE_TREE = [
    (),  # the title and the lead paragraph
    ("为什么需要检索",),
    ("为什么需要检索", "两条链路"),
    ("为什么需要检索", "常见误区"),
    ("动手搭一个最小系统",),  # with its unfenced commands and their lost-# comments "2. 启动服务…"
    ("动手搭一个最小系统", "安装依赖"),  # "2.1 安装依赖", not the "# 安装依赖" comment over pip
    ("动手搭一个最小系统", "到底该用多大的块？"),  # a question is a heading too
    ("结语",),
]


def _tree(name: str) -> list[tuple[str, ...]]:
    text = (DATA / name).read_text(encoding="utf-8")
    return [p.heading_path for p in split_document(name, text)[0].passages]


@pytest.mark.parametrize("name", ["numbered-with-code.txt", "numbered-code-indented.txt"])
def test_stray_hash_comments_in_unfenced_code_do_not_replace_the_numbered_headings(name):
    """The same article with its two `#` comment lines flush left (as pasted from a blog) and indented
    (as the issue's workaround did) has one tree: the `#` lines next to code are comments."""
    assert _tree(name) == CODE_ARTICLE_TREE


def test_the_comments_next_to_code_are_named_in_a_warning():
    text = (DATA / "numbered-with-code.txt").read_text(encoding="utf-8")
    _, warnings = split_document("a.txt", text)
    [said] = [w for w in warnings if "next to unfenced code" in w.message]
    assert said.line == 21
    assert "6 heading-like line(s)" in said.message and "'# 1. 拉取示例项目'" in said.message


def test_quoted_prompt_templates_are_text_and_the_warning_says_what_was_taken_and_ignored():
    assert _tree("quoted-prompts.txt") == [("为什么要用模型当裁判",), ("有据性裁判",), ("相关性裁判",), ("结语",)]
    text = (DATA / "quoted-prompts.txt").read_text(encoding="utf-8")
    doc, warnings = split_document("q.txt", text)
    assert "# Role\n你是一位严格的审计员" in doc.passages[1].text  # the template stays in its section
    [said] = [w.message for w in warnings]
    assert said.startswith("headings taken: 4 numbered lines (3, 7, 21, 35: '一、为什么要用模型当裁判'")
    assert "ignored: 6 Markdown # lines (11, 14, 18, 25, 28 …): their titles repeat ('role' ×2" in said


def test_short_lines_between_blank_lines_are_headings_when_nothing_else_is():
    assert _tree("plain-headings.txt") == [(), ("摆放位置",), ("定期重启",), ("固件升级",)]


def test_a_markdown_file_keeps_its_hash_headings_and_its_numbered_list_silently():
    text = (DATA / "guide.md").read_text(encoding="utf-8")
    doc, warnings = split_document("guide.md", text)
    assert [p.heading_path for p in doc.passages] == [
        ("Gateway guide",),
        ("Gateway guide", "Installing"),
        ("Gateway guide", "Updating"),
    ]
    assert [w.line for w in warnings] == [20]  # only the # comment inside the fence, as before


def test_a_one_line_article_is_cut_at_sentence_ends_with_no_scraps():
    text = (DATA / "one-line.txt").read_text(encoding="utf-8")
    doc, warnings = split_document("one.txt", text)
    assert [p.id for p in doc.passages] == ["one.txt", "one.txt~p2"]
    assert all(p.text.endswith("。") and len(p.text) >= MIN_PASSAGE_CHARS for p in doc.passages)
    assert "no headings" in warnings[0].message


def test_paragraph_scraps_join_their_neighbour():
    """A long section of one-line paragraphs (a blog's) was one passage per paragraph, down to 2 characters."""
    paragraphs = ["第一段写了很多内容。" * 12, "好的", "第三段也写了很多内容。" * 12, "嗯。", "第五段。" * 30]
    text = "一、长的一节\n\n" + "\n\n".join(paragraphs) + "\n"
    doc, _ = split_document("s.txt", text, max_passage_chars=300)
    assert [len(p.text) for p in doc.passages] == [6 + 2 + 120 + 2 + 2, 132 + 2 + 2, 120]
    assert doc.passages[0].text.endswith("好的") and doc.passages[1].text.endswith("嗯。")


def test_a_short_section_joins_its_subsection_or_its_sibling_not_the_previous_chapter():
    blocks = [
        "一、第一章",
        "第一章的正文足够长，说明了这一章要讲的全部内容和背景。",
        "二、第二章",
        "2.1 简介",
        "很短。",  # 2.1's section is 11 characters
        "2.2 细节",
        "第二章细节部分的正文也足够长，讲清楚了每一个步骤。",
    ]
    doc, warnings = split_document("c.txt", "\n\n".join(blocks) + "\n")
    first, joined = doc.passages
    assert (first.id, joined.id) == ("c.txt#第一章", "c.txt#第二章/细节") and joined.text.startswith("2.1 简介")
    assert [w.message for w in warnings] == [
        f"1 section(s) under {MIN_SECTION_CHARS} characters joined to a neighbour (c.txt#第二章/简介 into "
        "c.txt#第二章/细节)"
    ]


def test_the_structure_folder_loads_with_no_passage_under_the_minimum():
    corpus = load_corpus(DATA)
    assert min(len(p.text) for p in corpus.passages.values()) >= MIN_SECTION_CHARS


@pytest.mark.skipif(not SEEDS.is_dir(), reason="the seed articles live beside the clone, not in it")
def test_the_seed_articles_as_txt():
    """The issue's articles: 869 passages, some of 2 characters, before. The numbered tree of the one with
    stray `# 安装依赖` lines, counted by hand: 17 chapters (一 … 十六, 二十四) and 24 sections (1.1 … 24.3)."""
    corpus = load_corpus(SEEDS)
    assert len(corpus) < 250 and min(len(p.text) for p in corpus.passages.values()) >= MIN_SECTION_CHARS
    [doc] = [d for d in corpus.documents.values() if d.text.count("# 安装依赖") == 1]
    headings = {p.heading_path for p in doc.passages if p.heading_path}
    chapters = {h[0] for h in headings}
    sections = {h[:2] for h in headings if len(h) > 1}
    assert (len(chapters), len(sections)) == (17, 24)
    # Without the stray lines (indented, as the workaround did) the tree is the same.
    indented = doc.text.replace("\n# 安装依赖", "\n    # 安装依赖").replace("\n# 1. ", "\n    # 1. ")
    again = split_document(doc.id, indented)[0]
    assert {p.heading_path for p in again.passages if p.heading_path} == headings


@pytest.mark.skipif(not CMRC.is_file(), reason="CMRC 2018 lives beside the clone, not in it")
def test_cmrc_paragraphs_saved_as_txt_find_no_headings(tmp_path):
    """848 Chinese Wikipedia paragraphs, numbered notes inside them (``…请至战国无双系列1.由于…``): as
    ``.txt`` files, each is one passage with no heading taken."""
    import json

    rows = [json.loads(line) for line in CMRC.read_text(encoding="utf-8").splitlines() if line.strip()]
    for row in rows:
        (tmp_path / f"{row['id']}.txt").write_text(row["text"], encoding="utf-8")
    corpus = load_corpus(tmp_path)
    assert len(corpus) == len(rows) == 848
    assert not any(d.sectioned for d in corpus.documents.values())


def test_corpus_warnings_are_printed_once_per_corpus_change(tmp_path):
    """`init` prints them; every later command only says they stand, until the corpus changes."""
    from ragtrack.api import init_project
    from ragtrack.config import load_config
    from ragtrack.errors import corpus_warning_lines

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "q.txt").write_text((DATA / "quoted-prompts.txt").read_text(encoding="utf-8"), encoding="utf-8")
    report = init_project(tmp_path / "project", corpus=str(docs))
    assert any("headings taken: 4 numbered lines" in w for w in report.corpus_warnings)
    config = load_config(tmp_path / "project")
    corpus = config.load_corpus()
    shown, standing = corpus_warning_lines(corpus.warnings, config.cache_dir, corpus.digest)
    assert shown == []
    assert standing == "the corpus's 1 loading warning(s), shown before, stand (`ragtrack corpus ls` lists them)"
    # A changed corpus warns again, once.
    (docs / "q.txt").write_text("# Role\n\nA.\n\n# Role\n\nB.\n", encoding="utf-8")
    corpus = config.load_corpus()
    shown, standing = corpus_warning_lines(corpus.warnings, config.cache_dir, corpus.digest)
    assert len(shown) == 1 and "gives the ID of an earlier section" in shown[0] and standing == ""
    assert corpus_warning_lines(corpus.warnings, config.cache_dir, corpus.digest)[0] == []
