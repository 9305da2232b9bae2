"""Judge calibration arithmetic on a case small enough to check by hand, and the shipped set."""

import json

import pytest

from ragtrack.api import calibrate
from ragtrack.errors import InputError
from ragtrack.evaluation.calibration import agreement, load_cases
from ragtrack.llm.fake_server import FakeOpenAIServer

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


def test_calibrate_against_an_endpoint_runs_cases_in_parallel_and_keeps_their_order(project, monkeypatch):
    """Over real HTTP: each reply's score is the case's index mod 5 + 1, so any reordering
    of the concurrent results would show up as disagreement with the labels."""
    cases_path = REPO / "golden/calibration/calibration.jsonl"
    cases = load_cases(cases_path)[:12]
    score_of = {c.answer: i % 5 + 1 for i, c in enumerate(cases)}
    assert len(score_of) == len(cases)  # every judge prompt carries the candidate answer

    def reply(request: dict) -> str:
        prompt = request["messages"][-1]["content"]
        score = next(s for answer, s in score_of.items() if answer in prompt)
        return f'{{"score": {score}, "reason": "canned"}}'

    with FakeOpenAIServer(reply, latency_s=0.05) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        report = calibrate("openai:fake", root=project, cases_path=str(cases_path), limit=12, use_cache=False)
        assert server.log.peak_in_flight > 1
    for judge, predicted in report.predictions.items():
        expected = [score_of[c.answer] if judge in c.labels else None for c in cases]
        assert predicted == expected, judge


def _case(case_id: str, answer: str = "a", **labels) -> str:
    row = {"id": case_id, "lang": "en", "question": "q", "contexts": [], "gt_answer": "g", "answer": answer}
    return json.dumps({**row, "labels": labels or {"correctness": 4}}) + "\n"


def test_an_empty_calibration_set_is_refused_and_no_run_is_logged(project, tmp_path):
    """An agreement over n = 0 cases (0.00) is no measurement: refused before the store is opened."""
    path = tmp_path / "empty.jsonl"
    path.write_text("\n")
    with pytest.raises(InputError, match=r"empty.jsonl: holds no cases: a calibration needs hand-labelled cases"):
        calibrate("offline", root=project, cases_path=str(path))
    assert not (project / "mlruns").exists()


def test_duplicate_and_conflicting_calibration_rows_are_each_named_by_line(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(
        _case("a")
        + _case("b", answer="b")
        + _case("a")  # the same case again
        + _case("c", answer="b", correctness=2)  # b's question and answer, another label
        + _case("b", answer="other", correctness=4, relevance=3)  # b's ID, other labels
    )
    with pytest.raises(InputError) as e:
        load_cases(path)
    assert str(e.value).splitlines() == [
        "3 problem(s):",
        f"  {path}:3: id: a duplicate of line 1 (the same ID): remove one",
        f"  {path}:4: labels: conflicts with line 2 (the same question and answer as 'b', labels correctness 4 "
        "there, correctness 2 here): keep the right one",
        f"  {path}:5: labels: conflicts with line 2 (the same ID, labels correctness 4 there, correctness 4, "
        "relevance 3 here): keep the right one",
    ]
