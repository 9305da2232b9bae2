"""``ragtrack judge align``: the split and the example picking by hand, the keep-or-not rule, and the
whole loop over real HTTP against a stand-in judge biased in a known way (one point too generous unless
its prompt shows the project's graded examples)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ragtrack.api import align, evaluate
from ragtrack.cli import main
from ragtrack.errors import InputError, RagtrackError
from ragtrack.evaluation.alignment import (
    HEADING,
    aligned_path,
    digest_of,
    fields_read,
    improved,
    load_aligned,
    pick_examples,
    pool_size,
    render_examples,
    split_cases,
)
from ragtrack.evaluation.calibration import Agreement, CalibrationCase, load_cases
from ragtrack.llm.fake_server import FakeOpenAIServer
from ragtrack.testing.judges import labelled_judge

from .conftest import REPO

CASES = REPO / "golden/calibration/calibration.jsonl"


def case(id: str, label: int, lang: str = "en", answer: str = "", judge: str = "correctness") -> CalibrationCase:
    return CalibrationCase(
        id=id,
        lang=lang,
        question="q",
        contexts=("c",),
        gt_answer="g",
        answer=answer or f"answer {id}",
        labels={judge: label},
        note=f"note {id}",
    )


# ------------------------------------------------------------------ the split


@pytest.mark.parametrize(("n", "k"), [(1, 0), (2, 1), (3, 1), (4, 1), (5, 2), (10, 3), (13, 4)])
def test_pool_size_is_three_tenths_rounded_half_up_and_leaves_each_side_one(n, k):
    # 0.3n + 0.5, floored: 5 → 2.0 → 2, 13 → 4.4 → 4; at least 1 from two cases on, never all of them
    assert pool_size(n) == k


def test_split_is_stratified_by_language_and_label_and_seeded():
    strata = {("en", 1): 1, ("en", 2): 2, ("en", 3): 5, ("en", 5): 10, ("zh", 4): 4}
    cases = [case(f"{lang}-{label}-{i}", label, lang) for (lang, label), n in strata.items() for i in range(n)]
    cases.append(case("other", 3, judge="relevance"))  # no correctness label: on neither side
    split = split_cases(cases, "correctness", seed=0)
    pooled = {(c.lang, c.labels["correctness"]) for c in split.pool}
    per_stratum = {s: sum((c.lang, c.labels["correctness"]) == s for c in split.pool) for s in strata}
    # by hand: pool_size 1 → 0, 2 → 1, 5 → 2, 10 → 3, 4 → 1
    assert per_stratum == {("en", 1): 0, ("en", 2): 1, ("en", 3): 2, ("en", 5): 3, ("zh", 4): 1}
    assert len(split.pool) == 7 and len(split.held_out) == 22 - 7
    assert ("en", 1) not in pooled  # the lone case is held out
    assert {c.id for c in split.pool}.isdisjoint(c.id for c in split.held_out)
    assert {c.id for c in split.pool} | {c.id for c in split.held_out} == {c.id for c in cases} - {"other"}
    order = [c.id for c in cases]
    assert [c.id for c in split.held_out] == [i for i in order if i in {c.id for c in split.held_out}]
    assert split_cases(list(reversed(cases)), "correctness", seed=0).pool == tuple(reversed(split.pool)), (
        "membership depends on the seed and the ids, not on the file order"
    )
    others = {tuple(c.id for c in split_cases(cases, "correctness", seed=s).pool) for s in range(1, 6)}
    assert others - {tuple(c.id for c in split.pool)}, "another seed gives another split"


# ------------------------------------------------------------------ picking examples


def test_examples_span_the_score_range_shortest_of_each_level():
    pool = [
        case("l1-long", 1, answer="a much longer answer at level one"),
        case("l1", 1),
        case("l2", 2),
        case("l3", 3),
        case("l4", 4),
        case("l5-long", 5, answer="a much longer answer at level five"),
        case("l5", 5),
        case("zh-l3", 3, lang="zh"),
    ]
    ids = lambda chosen: [c.id for c in chosen]  # noqa: E731
    assert ids(pick_examples(pool, "correctness", "en", 5)) == ["l1", "l2", "l3", "l4", "l5"]
    assert ids(pick_examples(pool, "correctness", "en", 3)) == ["l1", "l3", "l5"]  # levels 0, 2, 4 of five
    # four of five levels: floor(i * 4/3 + 0.5) for i = 0..3 → 0, 1, 3, 4
    assert ids(pick_examples(pool, "correctness", "en", 4)) == ["l1", "l2", "l4", "l5"]
    assert pick_examples(pool, "correctness", "zh", 5) == []  # one zh case cannot make three examples


def test_fewer_levels_than_three_are_filled_with_the_next_shortest():
    pool = [case("a", 2, answer="aa"), case("b", 2, answer="bbbb"), case("c", 5), case("d", 2, answer="dddddddd")]
    assert [c.id for c in pick_examples(pool, "correctness", "en", 5)] == ["a", "b", "c"]
    assert pick_examples(pool[:2], "correctness", "en", 5) == []


def test_an_example_shows_what_its_judge_reads_and_the_reviewers_score():
    assert fields_read("correctness", "en") == ["question", "gt_answer", "answer"]
    assert fields_read("groundedness", "zh") == ["contexts", "answer"]
    c = CalibrationCase(
        id="x",
        lang="en",
        question="Which sampler?",
        contexts=("Euler is the default.",),
        gt_answer="Euler.",
        answer="Use {{answer}} Euler.",
        labels={"correctness": 4, "groundedness": 2},
        note="",
    )
    text = render_examples([c], "groundedness", "en")
    assert text.startswith(HEADING["en"])
    assert "Contexts: [1] Euler is the default." in text and "Answer: Use {{answer}} Euler." in text
    assert "Question:" not in text and "Reference answer:" not in text
    assert 'Reply: {"score": 2, "reason": "Scored 2 by the reviewer."}' in text


# ------------------------------------------------------------------ keep or not


def agreeing(exact: float, within: float, rho: float | None, errors: int = 0) -> Agreement:
    return Agreement("correctness", 10, errors, exact, within, rho)


@pytest.mark.parametrize(
    ("before", "after", "kept"),
    [
        (agreeing(0.3, 1.0, 0.9), agreeing(0.8, 1.0, 0.9), True),  # exact rises, the rest hold
        (agreeing(0.3, 1.0, 0.9), agreeing(0.3, 1.0, 0.9), False),  # the same: nothing gained
        (agreeing(0.3, 1.0, 0.9), agreeing(0.8, 0.9, 0.95), False),  # within-one fell
        (agreeing(0.3, 1.0, 0.9), agreeing(0.8, 1.0, 0.9, errors=1), False),  # an error more
        (agreeing(0.3, 1.0, None), agreeing(0.3, 1.0, 0.5), True),  # a constant judge now ranks
        (agreeing(0.3, 1.0, 0.5), agreeing(0.9, 1.0, None), False),  # and one that stopped ranking
    ],
)
def test_improved_only_when_nothing_is_worse_and_something_better(before, after, kept):
    assert improved(before, after) is kept


# ------------------------------------------------------------------ over real HTTP


def serve(monkeypatch, reply):
    server = FakeOpenAIServer(reply)
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback")
    return server


def test_align_cures_a_generous_judge_saves_a_new_identity_and_an_eval_records_it(project, monkeypatch):
    cases = load_cases(CASES)
    with serve(monkeypatch, labelled_judge(cases, bias=1)) as server:
        report = align("openai:fake-model", root=project, cases_path=str(CASES))
        asked = len(server.log.requests)
        for r in report.judges:
            labels = [next(c for c in cases if c.id == i).labels[r.judge] for i in r.held_out]
            fives = sum(label == 5 for label in labels) / len(labels)
            # one point too high: only a 5 stays exact, every verdict within one; with the examples: exact
            assert (r.before.exact, r.before.within_one) == (pytest.approx(fives), 1.0), r.judge
            assert (r.after.exact, r.after.within_one, r.after.spearman) == (1.0, 1.0, pytest.approx(1.0)), r.judge
            assert r.kept and 3 <= len(r.examples["en"]) <= 5 and 3 <= len(r.examples["zh"]) <= 5
            shown = {i for ids in r.examples.values() for i in ids}
            assert shown.isdisjoint(r.held_out), "no example is graded on"
        assert asked == sum(2 * len(r.held_out) for r in report.judges)  # plain and aligned, each case once

        path = aligned_path(project, "openai:fake-model")
        assert report.saved is not None and report.saved.path == path
        saved = json.loads(path.read_text())
        assert saved["digest"] == digest_of(saved["prompts"]) == report.saved.digest
        assert set(saved["prompts"]) == {"correctness", "groundedness", "relevance", "organization"}

        plain = evaluate("v1", root=project, judge="openai:fake-model")
        aligned = evaluate("v1", root=project, judge="openai:fake-model", judge_aligned=True)
        digest = report.saved.digest
        assert aligned.params["judge_aligned"] == digest and plain.params["judge_aligned"] == "no"
        assert aligned.params["judge_identity"].endswith(f"|aligned={digest}")
        assert (
            aligned.params["judge_identity"].split("|prompts=")[1]
            != plain.params["judge_identity"].split("|prompts=")[1]
        ), "the examples change the prompt hash too"
        # A Spark executor rebuilds the same aligned judges from the project (its identity is checked there).
        from ragtrack.engines import JudgeSource
        from ragtrack.engines.spark_judging import JudgeSetup, panel_for

        source = JudgeSource(str(project.resolve()), "openai:fake-model", True, aligned=True)
        steps = ("correctness", "groundedness", "relevance", "organization")
        setup = JudgeSetup(source, aligned.params["judge_language"], 1, steps, None, aligned.params["judge_identity"])
        assert panel_for(setup).identity == aligned.params["judge_identity"]
        plain_setup = JudgeSetup(JudgeSource(source.root, source.judge), setup.language, 1, steps, None, setup.identity)
        with pytest.raises(RagtrackError, match="on a Spark executor"):
            panel_for(plain_setup)

        judged = [r for r in server.log.requests[asked:] if r["messages"][0]["role"] == "system"]
        with_examples = [r for r in judged if HEADING["en"] in r["messages"][0]["content"]]
        assert with_examples and len(with_examples) == len(judged) // 2  # the aligned eval's, none of the plain one's

    from mlflow import MlflowClient

    from ragtrack.config import load_config
    from ragtrack.tracking.store import Tag, resolve_tracking_uri

    run = MlflowClient(resolve_tracking_uri(load_config(project))).get_run(aligned.run_id)
    assert run.data.tags[Tag.JUDGE_ALIGNED] == digest
    assert "aligned judge" in run.data.tags[Tag.NOTE] and digest in run.data.tags[Tag.NOTE]


def test_a_judge_the_examples_do_not_help_saves_nothing(project, monkeypatch):
    cases = load_cases(CASES)
    # already on the labels' scale (0) and thrown off by the examples (-1): no judge improves
    for aligned_bias in (0, -1):
        with serve(monkeypatch, labelled_judge(cases, bias=0, aligned_bias=aligned_bias)):
            result = CliRunner().invoke(
                main, ["--root", str(project), "judge", "align", "--judge", "openai:fake-model", "--cases", str(CASES)]
            )
        assert result.exit_code == 0, result.output
        assert "nothing saved" in result.output
        assert not (project / "judges").exists()
    with pytest.raises(RagtrackError, match="no aligned judge for openai:fake-model"):
        evaluate("v1", root=project, judge="openai:fake-model", judge_aligned=True)


def test_an_aligned_judge_is_refused_for_another_endpoint_or_once_edited(project, monkeypatch):
    with serve(monkeypatch, labelled_judge(load_cases(CASES), bias=1)) as server:
        report = align("openai:fake-model", root=project, cases_path=str(CASES), examples=3)
        base_url = server.base_url
    assert report.saved is not None
    with pytest.raises(RagtrackError, match="was aligned for"):
        load_aligned(project, "openai:fake-model", "openai|fake-model|http://127.0.0.1:1/v1")
    path = report.saved.path
    saved = json.loads(path.read_text())
    assert "fake-model" in saved["llm"] and base_url in saved["llm"]
    saved["prompts"]["correctness"]["en"] += " edited"
    path.write_text(json.dumps(saved))
    with pytest.raises(InputError, match="digest: does not match"):
        load_aligned(project, "openai:fake-model", saved["llm"])


def test_the_offline_heuristics_cannot_be_aligned(project):
    with pytest.raises(RagtrackError, match="read no prompt"):
        align("offline", root=project, cases_path=str(CASES))
    with pytest.raises(RagtrackError, match="no prompt to align"):
        evaluate("v1", root=project, judge_aligned=True)


def test_a_missing_cases_file_is_one_error_line_and_nothing_is_written(project):
    missing = project / "nope.jsonl"
    before = sorted(project.rglob("*"))
    result = CliRunner().invoke(
        main, ["--root", str(project), "judge", "align", "--judge", "openai:fake-model", "--cases", str(missing)]
    )
    assert result.exit_code == 2 and f"error: {missing}: calibration set not found" in result.output
    assert sorted(project.rglob("*")) == before  # no store, no aligned judge
