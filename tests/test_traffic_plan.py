"""The seeded production traffic: its claims about itself hold, so the loop's tests can trust it."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from ragtrack.corpus import load_corpus
from ragtrack.golden import load_golden
from ragtrack.production.messages import ProductionMessage
from ragtrack.testing.traffic import traffic_plan


@pytest.fixture(scope="module", params=["en", "zh"])
def plan(request):
    return traffic_plan(request.param)


def test_the_same_seed_gives_the_same_plan_and_another_seed_another():
    a, b = traffic_plan("en"), traffic_plan("en")
    assert json.dumps(a.to_json(), sort_keys=True) == json.dumps(b.to_json(), sort_keys=True)
    other = traffic_plan("en", seed=1)
    assert [m.message_id for m in other.messages()] != [m.message_id for m in a.messages()]
    assert len(other.problems) == 6


def test_size_versions_days_and_channels(plan):
    assert len(plan.conversations) == 300
    messages = plan.messages()
    assert len({m.message_id for m in messages}) == len(messages) > 300
    assert {m.app_version for m in messages} == set(plan.app_versions) and len(plan.app_versions) == 2
    assert {m.day for m in messages} == set(plan.days) and len(plan.days) == 5
    assert {v for (v, day) in plan.daily_counts() if day == plan.days[2]} == set(plan.app_versions)
    webapp = [c for c in plan.conversations if c.channel == "webapp"]
    assert 0 < len(webapp) < 30 and all(not m.problem for c in webapp for m in c.messages)
    for c in plan.conversations:
        times = [m.created_at for m in c.messages]
        assert times == sorted(times) and c.created_at == times[0]


def test_exactly_six_problems_each_disliked_by_several_users_and_one_covered(plan):
    assert len(plan.problems) == 6
    assert sum(p.covered_by is not None for p in plan.problems) == 1
    messages = {m.message_id: m for m in plan.messages()}
    for p in plan.problems:
        mine = [messages[i] for i in p.message_ids]
        assert {m.problem for m in mine} == {p.key}
        assert p.users == len({m.user for m in mine}) >= 4
        dislikers = {m.user for m in mine if m.rating == "dislike"}
        assert len(dislikers) == p.users and p.dislikes == sum(m.rating == "dislike" for m in mine)
        assert len(mine) > p.users  # somebody asked twice
        assert len({m.question for m in mine}) >= 4  # paraphrased, not one string
        assert all(m.question in p.questions for m in mine)
    # no other question is disliked by two users: the six are the only multi-user complaints
    disliked = defaultdict(set)
    for m in messages.values():
        if m.rating == "dislike" and not m.problem:
            disliked[m.question].add(m.user)
    assert disliked and all(len(users) == 1 for users in disliked.values())


def test_gt_passages_exist_and_the_covered_problem_is_the_golden_items_own(plan):
    corpus = load_corpus(plan.corpus)
    golden = {i.id: i for i in load_golden(plan.golden, corpus).items}
    golden_gt = {frozenset(i.gt_context_ids) for i in golden.values()}
    for p in plan.problems:
        assert set(p.gt_passage_ids) <= set(corpus.passages)
        assert not set(p.retrieved) & set(p.gt_passage_ids)  # the app retrieved the wrong thing
        if p.covered_by:
            assert set(golden[p.covered_by].gt_context_ids) == set(p.gt_passage_ids)
        else:
            assert frozenset(p.gt_passage_ids) not in golden_gt
    kinds = {p.type for p in plan.problems}
    assert {"A", "B"} <= kinds or {"A", "C"} <= kinds


def test_segments_are_corpus_passages_verbatim_and_refusals_retrieve_nothing(plan):
    corpus = load_corpus(plan.corpus)
    for m in plan.messages():
        for s in m.segments:
            assert s.text == corpus.passages[s.passage_id].text
            assert s.document_name == corpus.passages[s.passage_id].doc_id and 0 < s.score <= 1
        assert [s.score for s in m.segments] == sorted((s.score for s in m.segments), reverse=True)
        assert m.refused == (not m.segments)
        if m.rating:
            assert m.rating_history[-1] == (m.rated_at, m.rating) and m.rated_at >= m.created_at
    changed = [m for m in plan.messages() if len(m.rating_history) > 1]
    assert [[r for _, r in m.rating_history] for m in changed] == [["like", "dislike"]] * 2


def test_daily_counts_add_up(plan):
    counts = plan.daily_counts()
    messages = plan.messages()
    assert sum(c["messages"] for c in counts.values()) == len(messages)
    assert sum(c["dislikes"] for c in counts.values()) == sum(m.rating == "dislike" for m in messages)
    api = plan.daily_counts(channels=("api",))
    assert sum(c["messages"] for c in api.values()) == len(plan.messages(("api",))) < len(messages)


def test_jsonl_export_and_production_messages(tmp_path: Path):
    plan = traffic_plan("en")
    path = plan.write_jsonl(tmp_path / "export.jsonl")
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert len(records) == len(plan.messages())
    assert set(records[0]) == {
        "message_id", "question", "answer", "contexts", "rating", "comment", "user", "created_at", "app_version",
    }  # fmt: skip
    assert all(set(c) == {"text", "id"} for r in records for c in r["contexts"])
    pulled = plan.production_messages(salt="s")
    assert len(pulled) == len(records) and all(isinstance(m, ProductionMessage) for m in pulled)
    assert pulled[0].user != records[0]["user"] and len(pulled[0].user) == 16  # hashed
    assert ProductionMessage.from_json(json.loads(json.dumps(pulled[0].to_json()))) == pulled[0]
