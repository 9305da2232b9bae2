"""Canonical passages: stable IDs, spans, and errors that name file and line."""

import json

import pytest

from ragtrack.corpus import load_corpus, slugify, split_document, split_markdown
from ragtrack.errors import InputError

DOC = """# Title

Intro text.

## Part One

Body one.

### Detail

Detail text.

## Part Two

```bash
# not a heading
```
Body two.
"""


def test_markdown_ids_follow_heading_paths_and_spans_cover_text():
    doc = split_markdown("dir/doc.md", DOC)
    ids = [p.id for p in doc.passages]
    assert ids == [
        "dir/doc.md#title",
        "dir/doc.md#title/part-one",
        "dir/doc.md#title/part-one/detail",
        "dir/doc.md#title/part-two",
    ]
    for p in doc.passages:
        assert DOC[p.start : p.end] == p.text
    # A heading inside a code fence is text, not a section.
    assert "# not a heading" in doc.passages[-1].text


def test_empty_sections_are_skipped_and_duplicate_paths_get_a_suffix():
    text = "# A\n\n## B\n\n## B\n\nsecond b\n\n## C\n\nc body\n\n## C\n\nmore c\n"
    doc, warnings = split_document("x.md", text)
    ids = [p.id for p in doc.passages]
    # "# A" and the first "## B" have no body of their own.
    assert ids == ["x.md#a/b~2", "x.md#a/c", "x.md#a/c~2"]
    # Each ~N is said, at its heading's line: it changes when the sections are reordered.
    said = [(w.line, w.message) for w in warnings]
    assert said == [
        (5, "heading '## B' gives the ID of an earlier section (x.md#a/b): this one is x.md#a/b~2, "
            "which changes if the sections are reordered; retitle one of them"),
        (13, "heading '## C' gives the ID of an earlier section (x.md#a/c): this one is x.md#a/c~2, "
             "which changes if the sections are reordered; retitle one of them"),
    ]  # fmt: skip


def test_slugify_keeps_unicode_words():
    assert slugify("KSampler (Advanced)") == "ksampler-advanced"
    assert slugify("模型 文件") == "模型-文件"


def test_folder_ids_are_relative_and_stable(tiny_corpus, tmp_path):
    assert "guides/sampler.md#sampler-guide/guidance/cfg-value" in tiny_corpus.passages
    assert "notes.txt" in tiny_corpus.passages  # a file without headings is one passage
    copy = tmp_path / "elsewhere"
    import shutil

    shutil.copytree(tiny_corpus.source, copy)
    again = load_corpus(copy)
    assert list(again.passages) == list(tiny_corpus.passages)
    assert again.digest == tiny_corpus.digest


def test_crlf_files_give_the_same_ids_and_digest(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "d.md").write_text("# T\n\nbody\n", encoding="utf-8")
    (tmp_path / "b" / "d.md").write_bytes(b"# T\r\n\r\nbody\r\n")
    assert load_corpus(tmp_path / "a").digest == load_corpus(tmp_path / "b").digest


def test_jsonl_groups_passages_by_doc_id(tmp_path):
    path = tmp_path / "c.jsonl"
    rows = [
        {"id": "p1", "text": "alpha", "doc_id": "d"},
        {"id": "p2", "text": "beta", "doc_id": "d", "title": "B"},
        {"id": "p3", "text": "gamma"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    corpus = load_corpus(path)
    assert set(corpus.documents) == {"d", "p3"}
    doc = corpus.documents["d"]
    assert doc.text == "alpha\n\nbeta"
    for p in doc.passages:
        assert doc.text[p.start : p.end] == p.text


def test_jsonl_errors_name_file_line_and_field(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"id": "p1", "text": "ok"}\n{not json}\n{"id": "p1", "text": "again"}\n{"id": "p3", "text": "   "}\n',
        encoding="utf-8",
    )
    with pytest.raises(InputError) as e:
        load_corpus(path)
    lines = [str(p) for p in e.value.problems]
    assert lines[0].startswith(f"{path}:2: bad JSON")
    assert f"{path}:3: id: duplicate id 'p1' (first on line 1)" in lines
    assert f"{path}:4: text: missing or empty text" in lines


def test_passages_covering_needs_half_of_the_shorter(tiny_corpus):
    doc = tiny_corpus.documents["guides/sampler.md"]
    steps, cfg = (next(p for p in doc.passages if p.id.endswith(s)) for s in ("/steps", "cfg-value"))
    # A chunk over "Steps" that spills 5 characters into "Cfg value" retrieves Steps only...
    spill = [(steps.start, cfg.start + 5)]
    assert tiny_corpus.passages_covering(doc.id, spill, 0.5) == [steps.id]
    # ...while one that holds more than half of "Cfg value" retrieves it too.
    half = [(steps.start, cfg.start + (cfg.end - cfg.start) // 2 + 2)]
    assert cfg.id in tiny_corpus.passages_covering(doc.id, half, 0.5)
    # A small chunk entirely inside a passage is part of that passage.
    assert tiny_corpus.passages_covering(doc.id, [(cfg.start, cfg.start + 5)], 0.5) == [cfg.id]


def test_language_detection(tmp_path):
    (tmp_path / "zh.md").write_text("# 模型\n\n把检查点文件放进模型文件夹里，然后刷新页面。\n", encoding="utf-8")
    assert load_corpus(tmp_path).language == "zh"


def test_a_mostly_chinese_corpus_is_chinese_though_its_english_files_sort_first(tmp_path):
    """Only the first 400 passages were read: an English API reference sorting first made 907 Chinese
    passages of 1,327 an English corpus (English tokenizer, English embedder, recall 0)."""
    english = "".join(f"## Endpoint {n}\n\nReturns the record with the given identifier.\n\n" for n in range(450))
    (tmp_path / "a-api-reference.md").write_text("# API\n\n" + english, encoding="utf-8")
    chinese = "".join(f"## 第{n}条\n\n账号连续输错密码五次后会被锁定三十分钟。\n\n" for n in range(900))
    (tmp_path / "b-handbook.md").write_text("# 手册\n\n" + chinese, encoding="utf-8")
    corpus = load_corpus(tmp_path)
    assert len(corpus) > 1300 and corpus.language == "zh"


# ---------------------------------------------------------------- real documents: Chinese headings, code, long text

ZH_MANUAL = """青禾测试网关 用户手册
适用型号：QH-TEST

一、产品概述
（一）产品简介
这是一台测试用的网关，负责连接家中的传感器和插座。
（二）技术规格
子设备上限：64 个
工作温度：0 到 40 摄氏度

二、安装与联网
1.1 摆放建议
放在开阔且通风的位置，远离微波炉、金属柜子和承重墙。
1.2 添加到 App
1. 打开 App，点击加号。
2. 扫描机身上的二维码。
3. 等待添加成功
4. 为网关命名
"""


def test_chinese_numbered_headings_nest_and_ids_drop_the_markers():
    doc, warnings = split_document("gw.txt", ZH_MANUAL)
    ids = [p.id for p in doc.passages]
    assert ids == [
        "gw.txt",  # the title lines before the first heading
        "gw.txt#产品概述/产品简介",
        "gw.txt#产品概述/技术规格",
        "gw.txt#安装与联网/摆放建议",
        "gw.txt#安装与联网/添加到-app",
    ]
    # Numbered list items (sentences, or a run of numbered lines) stay in their section's text.
    assert "3. 等待添加成功" in doc.passages[-1].text
    assert doc.passages[1].heading_path == ("产品概述", "产品简介")
    assert warnings == []
    # Renumbering the sections keeps every ID.
    renumbered = ZH_MANUAL.replace("一、", "三、").replace("1.1 ", "2.1 ").replace("（二）", "（五）")
    assert [p.id for p in split_document("gw.txt", renumbered)[0].passages] == ids


def test_numbered_lines_that_read_as_sentences_are_not_headings():
    text = "说明\n\n1. 这一行是一句完整的话，以句号结束。\n正文。\n\n2.4GHz 和 5GHz 的区别\n正文二。\n"
    doc, _ = split_document("a.txt", text)
    assert [p.id for p in doc.passages] == ["a.txt"]


def test_markdown_headings_win_and_chinese_markers_in_them_are_dropped():
    text = "# 手册\n\n## 一、概述\n\n正文。\n\n一、这一行不是标题\n\n## 二、安装\n\n正文二。\n"
    ids = [p.id for p in split_document("m.md", text)[0].passages]
    assert ids == ["m.md#手册/概述", "m.md#手册/安装"]


def test_hash_lines_in_code_are_never_headings_and_are_reported():
    text = (
        "# Guide\n\nRun this:\n\n    pip install thing\n# a flush-left comment inside the indented block\n"
        "    thing --run\n\n```bash\n# a comment in a fence\nthing\n```\n\n## Next\n\nMore.\n"
    )
    doc, warnings = split_document("g.md", text)
    assert [p.id for p in doc.passages] == ["g.md#guide", "g.md#guide/next"]
    assert "# a flush-left comment" in doc.passages[0].text
    [w] = warnings
    assert w.line == 6 and "2 heading-like line(s) inside code blocks" in w.message and "lines 6, 10" in w.message


def test_an_unclosed_fence_is_reported():
    _, warnings = split_document("u.md", "# T\n\ntext\n\n```\ncode\n\n## Not a heading\n")
    assert any(w.line == 5 and "never closes" in w.message for w in warnings)


def test_long_sections_split_at_paragraphs_with_stable_ids_and_a_warning():
    paragraphs = [f"第{n}段。" + "内容" * 30 for n in range(1, 6)]  # 5 paragraphs of 64 characters
    text = "# 长文\n\n## 一节\n\n" + "\n\n".join(paragraphs) + "\n"
    doc, warnings = split_document("long.md", text, max_passage_chars=150)
    ids = [p.id for p in doc.passages]
    assert ids == ["long.md#长文/一节"] + [f"long.md#长文/一节~p{n}" for n in range(2, 6)]
    assert doc.passages[0].text.startswith("## 一节\n\n第1段")  # the heading stays with its first paragraph
    assert all(text[p.start : p.end] == p.text for p in doc.passages)
    assert doc.passages[3].text == paragraphs[3]
    [w] = warnings
    assert w.line == 3 and "limit 150" in w.message and "5 passages" in w.message
    # A paragraph longer than the limit is cut at sentence ends, packed up to the limit.
    one = "。".join(["一二三四五六七八九"] * 40) + "。"
    pieces = split_document("p.txt", one, max_passage_chars=100)[0].passages
    assert len(pieces) > 1 and all(len(p.text) <= 100 for p in pieces)
    assert "".join(p.text for p in pieces) == one


def test_a_document_without_headings_is_reported(tmp_path):
    (tmp_path / "note.txt").write_text("只有一段话，没有标题。\n", encoding="utf-8")
    (tmp_path / "long.txt").write_text("\n\n".join(["第一段。" * 30, "第二段。" * 30]), encoding="utf-8")
    corpus = load_corpus(tmp_path, max_passage_chars=150)
    assert list(corpus.passages) == ["long.txt", "long.txt~p2", "note.txt"]
    messages = [str(w) for w in corpus.warnings]
    assert any(m.startswith(f"{tmp_path / 'note.txt'}:1: no headings") for m in messages)
    assert any(m.startswith(f"{tmp_path / 'long.txt'}:1: the document (no headings") for m in messages)


def test_an_empty_document_is_reported_not_silently_left_out(tmp_path):
    (tmp_path / "empty.md").write_text("\n  \n", encoding="utf-8")
    (tmp_path / "note.md").write_text("# Note\n\nSome text.\n", encoding="utf-8")
    corpus = load_corpus(tmp_path)
    assert list(corpus.documents) == ["note.md"]
    assert [str(w) for w in corpus.warnings] == [f"{tmp_path / 'empty.md'}: no text: the document is left out"]


def test_the_shipped_knowledge_base_keeps_its_passages():
    from tests.conftest import REPO

    corpus = load_corpus(REPO / "golden" / "kb")
    assert corpus.digest == "30aa7878a73b3a1d" and len(corpus) == 268 and corpus.warnings == []


# ---------------------------------------------------------------- passage files: JSON arrays and other formats


def test_a_json_array_of_passages_loads_with_lines_in_errors(tmp_path):
    good = tmp_path / "c.json"
    good.write_text(json.dumps([{"id": "a", "text": "alpha"}, {"id": "b", "text": "beta"}], indent=1), "utf-8")
    assert list(load_corpus(good).passages) == ["a", "b"]
    bad = tmp_path / "bad.json"
    bad.write_text('[\n {"id": "a", "text": "x"},\n {"id": 7, "text": "y"}\n]\n', encoding="utf-8")
    with pytest.raises(InputError) as e:
        load_corpus(bad)
    assert str(e.value) == f'{bad}:3: id: must be a string, found the number 7: write it as "7"'
    obj = tmp_path / "obj.json"
    obj.write_text('{"passages": []}', encoding="utf-8")
    with pytest.raises(InputError, match="an array of passages; found an object with keys passages"):
        load_corpus(obj)
    lines = tmp_path / "lines.json"
    lines.write_text('{"id": "a", "text": "x"}\n{"id": "b", "text": "y"}\n', encoding="utf-8")
    with pytest.raises(InputError, match="name the file .jsonl"):
        load_corpus(lines)


def test_fields_of_other_corpus_formats_are_named(tmp_path):
    path = tmp_path / "beir.jsonl"
    path.write_text('{"_id": "d1", "title": "T", "text": "x"}\n{"id": "d2", "contents": "y"}\n', encoding="utf-8")
    with pytest.raises(InputError) as e:
        load_corpus(path)
    assert [str(p) for p in e.value.problems] == [
        f"{path}:1: id: missing; this row has '_id' (another corpus format): rename it to 'id'",
        f"{path}:2: text: missing; this row has 'contents' (another corpus format): rename it to 'text'",
    ]


def test_a_title_line_is_not_a_passage_of_its_own():
    # Above numbered headings, a lone title line names the document (like a bodiless heading)...
    doc, _ = split_document("r.txt", "阅览室使用说明\n\n一、开放时间\n每天九点开门。\n")
    assert [p.id for p in doc.passages] == ["r.txt#开放时间"]
    # ...and an article split at paragraphs keeps its title with the first paragraph.
    article = "读者常见问题\n\n" + "\n\n".join(f"问：第{n}个问题？答：" + "回答。" * 20 for n in range(3))
    pieces = split_document("faq.txt", article, max_passage_chars=100)[0].passages
    assert pieces[0].text.startswith("读者常见问题\n\n问：第0个问题") and len(pieces) == 3


def test_a_document_copied_twice_is_named_once(tmp_path):
    (tmp_path / "guide.md").write_text("# Power\n\nUse the 12 V adapter.\n", encoding="utf-8")
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "guide.md").write_bytes(b"# Power\r\n\r\nUse the 12 V adapter.\r\n")  # CRLF alike
    (tmp_path / "other.md").write_text("# Power\n\nUse the 5 V adapter.\n", encoding="utf-8")
    corpus = load_corpus(tmp_path)
    twins = [str(w) for w in corpus.warnings if "the same text as" in w.message]
    assert twins == [
        f"{tmp_path / 'guide.md'}: the same text as copy/guide.md: every passage has a twin there, so retrieval "
        "may return either copy while a GT ID names one (remove one, or expect lower scores)"
    ]
    assert len(corpus.documents) == 3  # still loaded: the warning explains, the user decides
