"""Human labels of versions' answers: the file format, matching labels to recorded answers, and the
prediction-powered figures against hand-computed values."""

from __future__ import annotations

import json
import math

import pytest

from ragtrack.errors import InputError
from ragtrack.evaluation.human_labels import delta_figures, load_labels, match, version_figures
from ragtrack.records import ItemRecord, JudgeRecord


def record(item: str, correctness: float | None, answer: str = "") -> ItemRecord:
    verdict = JudgeRecord(correctness, None if correctness is None else (correctness - 1) / 4, "")
    return ItemRecord(item, "A", "q", ["g"], "gt", answer or f"answer {item}", [], {}, {"correctness": verdict})


def label(version: str, item: str, correctness: int, answer: str = "", **more) -> dict:
    return {
        "id": item,
        "version": version,
        "lang": "en",
        "question": "q",
        "contexts": ["c"],
        "gt_answer": "gt",
        "answer": answer or f"answer {item}",
        "labels": {"correctness": correctness},
        **more,
    }


def write(path, rows) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


Z = 1.959963984540054


def test_a_versions_mean_is_the_unlabelled_judge_mean_minus_the_judges_error_on_the_labelled(tmp_path):
    records = [record("i1", 4), record("i2", 3), record("i3", 5), record("i4", 2)]
    file = load_labels(write(tmp_path / "l.jsonl", [label("v1", "i1", 3), label("v1", "i2", 3)]))
    (figure,) = version_figures(records, match(file, "v1", records))
    # By hand: unlabelled judge 5, 2 (mean 3.5, var 4.5); rectifier 4−3, 3−3 (mean 0.5, var 0.5).
    assert figure.ppi.estimate == pytest.approx(3.5 - 0.5)
    half = Z * math.sqrt(4.5 / 2 + 0.5 / 2)
    assert (figure.ppi.ci_low, figure.ppi.ci_high) == pytest.approx((3.0 - half, 3.0 + half))
    assert (figure.ppi.labelled, figure.ppi.unlabelled) == (2, 2)
    # Judge-only: the mean of 4, 3, 5, 2 ± z · SD/√4.
    sd = math.sqrt(sum((x - 3.5) ** 2 for x in (4, 3, 5, 2)) / 3)
    judge_only = (figure.judge, figure.judge_low, figure.judge_high)
    assert judge_only == pytest.approx((3.5, 3.5 - Z * sd / 2, 3.5 + Z * sd / 2))


def test_a_paired_delta_uses_the_items_labelled_on_both_sides(tmp_path):
    a = [record("i1", 2), record("i2", 3), record("i3", 3), record("i4", 4)]
    b = [record("i1", 4), record("i2", 3), record("i3", 5), record("i4", 2)]
    rows = [label("v1", "i1", 2), label("v1", "i2", 3), label("v5", "i1", 3), label("v5", "i2", 3)]
    rows.append(label("v5", "i3", 4))  # v5 only: not a labelled pair, so i3 stays judge-only
    file = load_labels(write(tmp_path / "l.jsonl", rows))
    (figure,) = delta_figures(a, match(file, "v1", a), b, match(file, "v5", b), {"correctness": (0.5, -1.0, 2.0)})
    # By hand: judge Δ on i1..i4 = 2, 0, 2, −2; labelled i1, i2: human Δ 1, 0 → rectifier 1, 0 (mean 0.5,
    # var 0.5); unlabelled i3, i4: Δ 2, −2 (mean 0, var 8).
    assert figure.ppi.estimate == pytest.approx(-0.5)
    half = Z * math.sqrt(8 / 2 + 0.5 / 2)
    assert (figure.ppi.ci_low, figure.ppi.ci_high) == pytest.approx((-0.5 - half, -0.5 + half))
    assert (figure.judge, figure.judge_low, figure.judge_high, figure.items) == (0.5, -1.0, 2.0, 4)


def test_without_labels_on_both_sides_the_delta_says_why(tmp_path):
    a, b = [record("i1", 2), record("i2", 3)], [record("i1", 4), record("i2", 3)]
    file = load_labels(write(tmp_path / "l.jsonl", [label("v1", "i1", 2), label("v1", "i2", 3)]))
    (figure,) = delta_figures(a, match(file, "v1", a), b, match(file, "v5", b), {"correctness": (1.0, 0.0, 2.0)})
    assert figure.ppi is None
    assert figure.reason == "no item with correctness labels of both v1's and v5's answers (needs 2)"


def test_a_label_of_another_answer_or_item_is_reported_and_left_out(tmp_path):
    records = [record("i1", 4, "Use cfg 1.0."), record("i2", 3), record("i3", 5)]
    rows = [
        label("v1", "i1", 2, answer="Use cfg 7."),  # v1 answered differently when it was labelled
        label("v1", "i2", 3, answer="answer  i2\n"),  # whitespace aside, the recorded answer
        label("v1", "i9", 3),
        label("v5", "i1", 5),  # another version's: not v1's business
    ]
    path = write(tmp_path / "l.jsonl", rows)
    matched = match(load_labels(path), "v1", records)
    assert list(matched.labels) == ["i2"]
    assert matched.left_out == [
        f"{path}:1: v1's recorded answer to i1 is not the one labelled (the label is for another answer): left out",
        f"{path}:3: v1's run has no item i9: label left out",
    ]
    (figure,) = version_figures(records, matched)
    assert figure.ppi is None and figure.reason == "one item only with correctness labels of v1's answers (needs 2)"


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([label("v1", "i1", 6)], ":1: labels.correctness: unknown value 6"),
        ([{k: v for k, v in label("v1", "i1", 3).items() if k != "version"}], ":1: version: required field is missing"),
        ([label("v1", "i1", 3), "{not json"], ":2: bad JSON"),
        ([label("v1", "i1", 3), label("v1", "i1", 4)], ":2: id: v1's answer to i1 is labelled already on line 1"),
        ([label("v1", "i1", 3, labels={"corectness": 3})], "unknown judge"),
    ],
)
def test_a_bad_label_file_names_file_line_and_field(tmp_path, rows, message):
    path = write(tmp_path / "labels.jsonl", rows)
    with pytest.raises(InputError) as e:
        load_labels(path)
    assert f"{path}" in str(e.value) and message in str(e.value)


def test_a_missing_label_file_is_named(tmp_path):
    with pytest.raises(InputError, match="human-label file not found"):
        load_labels(tmp_path / "nope.jsonl")


def test_the_shipped_labels_load_and_label_16_items_of_v1_and_v5():
    from .conftest import REPO

    file = load_labels(REPO / "golden" / "labels" / "human-labels.jsonl")
    assert file.versions() == {"v1": 16, "v5": 16}
    items = {v: {lab.id for lab in file.labels if lab.version == v} for v in ("v1", "v5")}
    assert items["v1"] == items["v5"]
