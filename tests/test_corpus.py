"""Canonical passages: stable IDs, spans, and errors that name file and line."""

import json

import pytest

from ragtrack.corpus import load_corpus, slugify, split_markdown
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
    ids = [p.id for p in split_markdown("x.md", text).passages]
    # "# A" and the first "## B" have no body of their own.
    assert ids == ["x.md#a/b~2", "x.md#a/c", "x.md#a/c~2"]


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
