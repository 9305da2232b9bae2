"""Golden loader errors, digest, and the shipped default golden set's integrity."""

import json
import re
from collections import Counter

import pytest

from ragtrack.corpus import load_corpus
from ragtrack.errors import InputError
from ragtrack.golden import load_golden

from .conftest import DATA, REPO


def test_tiny_golden_loads(tiny_corpus):
    golden = load_golden(DATA / "golden.jsonl", tiny_corpus)
    assert [i.id for i in golden.items] == ["a1", "a2", "b1", "c1", "d1"]
    assert golden.language == "en"


def test_an_unknown_gt_id_typed_with_full_width_marks_or_spaces_names_the_id_it_meant(tiny_corpus, tmp_path):
    """ "unknown context id" alone, where `corpus show` would have suggested the ID."""
    cfg = "guides/sampler.md#sampler-guide/guidance/cfg-value"
    typed = cfg.replace("#", "＃").replace("/", "／") + " "  # as an IME types it, with a trailing space
    row = {"id": "x", "question": "q?", "type": "A", "gt_context_ids": [typed], "gt_answer": "a"}
    path = tmp_path / "g.jsonl"
    path.write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    with pytest.raises(InputError) as e:
        load_golden(path, tiny_corpus)
    assert str(e.value.problems[0]).endswith(f"unknown context id {typed!r}; did you mean: {cfg}")


def test_every_problem_is_reported_with_file_line_and_field(tiny_corpus, tmp_path):
    good = {"id": "x", "question": "q?", "type": "A", "gt_context_ids": ["notes.txt"], "gt_answer": "a"}
    rows = [
        good,
        {**good, "id": "x2", "gt_context_ids": ["nope.md#missing"]},  # line 2: unknown id
        good,  # line 3: duplicate id
        {**good, "id": "y", "question": "  "},  # line 4: empty question
        {**good, "id": "z", "type": "E"},  # line 5: unknown type
        {**good, "id": "w", "colour": "red", "gt_anwser": "b"},  # line 6: unknown fields
        {**good, "id": "v", "gt_context_ids": "notes.txt"},  # line 7: one ID, not a list of them
        {**good, "id": 9},  # line 8: a number (it read "Input should be a valid string")
    ]
    path = tmp_path / "g.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n{broken\n", encoding="utf-8")
    with pytest.raises(InputError) as e:
        load_golden(path, tiny_corpus)
    got = [str(p) for p in e.value.problems]
    assert any(g.startswith(f"{path}:2: gt_context_ids: unknown context id 'nope.md#missing'") for g in got)
    assert f"{path}:3: id: duplicate item id 'x' (first on line 1)" in got
    assert f"{path}:4: question: must not be empty" in got
    assert any(g.startswith(f"{path}:5: type: unknown value 'E'") for g in got)
    assert any(g.startswith(f"{path}:6: colour: unknown field (known: ") and "gt_answer" in g for g in got)
    assert f"{path}:6: gt_anwser: unknown field (did you mean 'gt_answer'?)" in got
    assert f'{path}:7: gt_context_ids: must be a list, such as ["…"] (got str)' in got
    assert f'{path}:8: id: must be a string, found the number 9: write it as "9"' in got
    assert any(g.startswith(f"{path}:9: bad JSON") for g in got)
    assert len(got) == 9
    lines = [int(g.removeprefix(f"{path}:").split(":")[0]) for g in got]
    assert lines == sorted(lines), "reported in file order, as an editor walks them"
    assert [line.strip() for line in str(e.value).splitlines()[1:]] == got  # and printed so


def test_digest_is_stable_and_content_sensitive(tiny_corpus, tmp_path):
    a = load_golden(DATA / "golden.jsonl", tiny_corpus)
    b = load_golden(DATA / "golden.jsonl", tiny_corpus)
    assert a.digest == b.digest
    rows = (DATA / "golden.jsonl").read_text().splitlines()
    changed = tmp_path / "g.jsonl"
    changed.write_text("\n".join([rows[0].replace("8.0", "7.0"), *rows[1:]]))
    assert load_golden(changed, tiny_corpus).digest != a.digest
    assert a.limit(2).digest != a.digest


# ---------------------------------------------------------------- the shipped default set


@pytest.fixture(scope="module")
def shipped():
    corpus = load_corpus(REPO / "golden" / "kb")
    return corpus, load_golden(REPO / "golden" / "golden.jsonl", corpus)


def test_shipped_knowledge_base_size_and_structure(shipped):
    corpus, _ = shipped
    assert len(corpus.documents) >= 30
    assert len(corpus) >= 150
    depths = Counter(len(p.heading_path) for p in corpus.passages.values())
    assert depths[1] and depths[2] and depths[3], "H1, H2 and H3 sections all occur"


def test_shipped_golden_covers_every_type(shipped):
    corpus, golden = shipped
    assert len(golden) >= 40
    counts = Counter(i.type for i in golden.items)
    assert all(counts[t] >= 8 for t in "ABCD"), counts
    for item in golden.items:  # load_golden already rejects unknown IDs; be explicit anyway
        assert all(cid in corpus.passages for cid in item.gt_context_ids)
    tags = Counter(t for i in golden.items for t in i.tags)
    assert tags["trap"] >= 5 and tags["multi-hop"] >= 8 and tags["paraphrase"] >= 5


def test_type_a_key_facts_appear_in_their_gt_text(shipped):
    """Every backticked term and number of a type-A answer is in its GT passages."""
    corpus, golden = shipped
    for item in (i for i in golden.items if i.type == "A"):
        gt_text = " ".join(corpus.passages[c].text for c in item.gt_context_ids)
        ticked = re.findall(r"`([^`]+)`", item.gt_answer)
        numbers = re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.])", re.sub(r"`[^`]+`", " ", item.gt_answer))
        assert ticked or numbers, f"{item.id}: no key fact marked"
        for fact in ticked + numbers:
            assert fact in gt_text, f"{item.id}: {fact!r} not in its GT passages"


def test_the_example_chinese_golden_set_validates_against_its_corpus():
    from ragtrack.config import load_config
    from ragtrack.golden import staleness

    root = REPO / "examples" / "zh-kb"
    corpus = load_config(root).load_corpus()
    golden = load_golden(root / "golden.jsonl", corpus)
    assert len(golden) == 20 and {i.type for i in golden.items} == {"A", "B", "C", "D"}
    assert golden.language == "zh" and staleness(golden, corpus) == []
    assert all(i.gt_fingerprint for i in golden.items)
    # Numbered Chinese headings lose their markers; a heading-less file is split at paragraphs.
    assert "gateway-pro-manual.txt#安装与供电/供电要求" in corpus.passages
    a5 = next(i for i in golden.items if i.id == "zh-a5")
    assert a5.gt_context_ids == ("after-sales-service-notes.txt~p3",)
    assert corpus.passages["after-sales-service-notes.txt~p3"].text.startswith("在官方商城")


def test_a_golden_set_written_as_a_json_array_is_one_problem_not_one_per_line(tmp_path):
    """It was 26 "bad JSON" lines for a 26-line array."""
    from ragtrack.corpus import load_corpus
    from ragtrack.errors import InputError
    from ragtrack.golden import load_golden

    corpus = load_corpus(REPO / "golden" / "kb")
    rows = [json.loads(line) for line in (REPO / "golden" / "golden.jsonl").read_text().splitlines()[:3]]
    golden = tmp_path / "golden.jsonl"
    golden.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    with pytest.raises(InputError) as raised:
        load_golden(golden, corpus)
    [problem] = raised.value.problems
    assert problem.line == 1 and "holds a JSON array, but JSON Lines has one object per line" in problem.message


def test_a_gt_id_in_a_document_left_out_of_the_corpus_says_why(tmp_path):
    """An empty file's ID got "unknown context id 'empty.md'; `ragtrack corpus ls` lists them"."""
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "guide.md").write_text("# Guide\n\nText.\n", encoding="utf-8")
    (kb / "empty.md").write_text("\n", encoding="utf-8")
    corpus = load_corpus(kb)
    row = {"id": "a", "question": "q?", "type": "A", "gt_context_ids": ["empty.md"], "gt_answer": "a"}
    path = tmp_path / "g.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    with pytest.raises(InputError) as e:
        load_golden(path, corpus)
    [problem] = e.value.problems
    assert problem.message == "unknown context id 'empty.md'; the corpus left empty.md out (no text)"
