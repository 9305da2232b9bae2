"""Judge calibration arithmetic on a case small enough to check by hand, and the shipped set."""

import json

import pytest

from ragtrack.api import calibrate
from ragtrack.errors import InputError
from ragtrack.evaluation.calibration import agreement, load_cases

from .conftest import REPO


def test_agreement_hand_computed():
    labels = [5, 4, 3, 2, 1]
    predicted = [5, 3, 3, None, 3]
    a = agreement("correctness", labels, predicted)
    # scored pairs: (5,5) (4,3) (3,3) (1,3); one error
    assert a.n == 4 and a.errors == 1
    assert a.exact == 0.5  # 2 of 4 exact
    assert a.within_one == 0.75  # |1-3| = 2 is the only miss
    # ranks of labels (5,4,3,1) -> 4,3,2,1; predictions (5,3,3,3) -> 4,2,2,2 ; Pearson of ranks:
    # x = (4,3,2,1) mean 2.5 ; y = (4,2,2,2) mean 2.5 ; cov = 1.5*1.5 + .5*-.5 + -.5*-.5 + -1.5*-.5 = 3
    # var x = 5, var y = 3 -> rho = 3 / sqrt(15)
    assert a.spearman == pytest.approx(3 / 15**0.5)


def test_spearman_is_none_not_nan_when_undefined():
    assert agreement("relevance", [3, 3, 3], [3, 4, 5]).spearman is None
    assert agreement("relevance", [3], [3]).spearman is None
    empty = agreement("relevance", [3, 4], [None, None])
    assert empty.n == 0 and empty.errors == 2 and empty.exact == 0.0


def test_shipped_calibration_set_covers_every_level_in_both_languages():
    cases = load_cases(REPO / "golden" / "calibration" / "calibration.jsonl")
    assert len(cases) >= 40
    for judge in ("correctness", "groundedness", "relevance", "organization"):
        for lang in ("en", "zh"):
            levels = {c.labels[judge] for c in cases if c.lang == lang and judge in c.labels}
            assert levels == {1, 2, 3, 4, 5}, (judge, lang, levels)
    traps = {c.trap for c in cases}
    assert {"faithful_to_wrong_material", "unsupported_specifics", "verbose_non_answer", "stitched"} <= traps


def test_bad_calibration_line_names_file_line_and_field(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(
        json.dumps(
            {
                "id": "x",
                "lang": "fr",
                "question": "q",
                "contexts": [],
                "gt_answer": "g",
                "answer": "a",
                "labels": {"correctness": 7},
            }
        )
        + "\n"
    )
    with pytest.raises(InputError) as e:
        load_cases(path)
    text = str(e.value)
    assert f"{path}:1: lang" in text and f"{path}:1: labels.correctness" in text


def test_calibrate_logs_agreement_for_the_heuristic_judges(project):
    report = calibrate("offline", root=project, cases_path=str(REPO / "golden/calibration/calibration.jsonl"), limit=8)
    overall = {a.judge: a for a in report.agreements["all"]}
    assert set(overall) == {"correctness", "groundedness", "relevance", "organization"}
    assert all(a.n + a.errors == 8 for a in overall.values())
    assert report.judge_identity.startswith("heuristic@")
