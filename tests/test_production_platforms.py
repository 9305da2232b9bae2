"""``ragtrack logs pull`` from the platforms, over real HTTP against the loopback stand-ins on 127.0.0.1
(seeded with the traffic plan of ragtrack.testing.traffic) into a real MLflow store.

What each pull must find is computed from the plan by hand-written rules (which conversations Dify's
service API can see, what each rating was at a given moment), never from what the pull returned.
"""

from __future__ import annotations

import json
import shutil
import uuid
from dataclasses import replace
from pathlib import Path

import httpx
import mlflow
import pytest
from click.testing import CliRunner
from mlflow.entities import AssessmentSource, AssessmentSourceType

from ragtrack.api import pull_logs
from ragtrack.cli import main
from ragtrack.config import load_config
from ragtrack.errors import RagtrackError
from ragtrack.production import pull as pull_module
from ragtrack.production.messages import hash_user
from ragtrack.production.sources import dify as dify_source
from ragtrack.production.sources import mlflow as mlflow_source
from ragtrack.production.sources import ragflow as ragflow_source
from ragtrack.report import PARTIAL_COVERAGE
from ragtrack.testing.dify_server import DifyServer
from ragtrack.testing.dify_traces import write_dify_traces
from ragtrack.testing.knowledge import stable_id
from ragtrack.testing.ragflow_server import RagflowServer
from ragtrack.testing.server import Fault
from ragtrack.testing.traffic import traffic_plan
from ragtrack.tracking.production import RATING, ProductionLog, read_messages
from ragtrack.tracking.store import open_store
from tests.conftest import killed_after_writes

from .readme import output

REPO = Path(__file__).resolve().parent.parent
RAGFLOW_KEY = "ragflow-loopback-5c7e9a1b3d2f"


@pytest.fixture(scope="module")
def plan():
    return traffic_plan("en")


@pytest.fixture
def shipped(tmp_path) -> Path:
    """A project over the shipped knowledge base (the plan's corpus)."""
    root = tmp_path / "project"
    shutil.copytree(REPO / "golden", root / "golden")
    (root / "pipelines").mkdir()
    return root


def dify_spec(project: Path, server: DifyServer, version: str, monkeypatch) -> str:
    env = "KEY_" + version.replace("-", "_").upper()
    monkeypatch.setenv(env, f"app-{version}")
    (project / "pipelines" / f"{version}.toml").write_text(
        f'[version]\nname = "{version}"\n\n[agent]\nkind = "dify"\nbase_url = "{server.base_url}"\n'
        f'api_key_env = "{env}"\n'
    )
    return version


def rating_at(m, as_of: str | None) -> str | None:
    history = [r for at, r in m.rating_history if as_of is None or at <= as_of]
    return history[-1] if history else None


def service_api_view(plan, version: str, as_of: str | None = None, deleted: frozenset = frozenset()):
    """What Dify's service API can read of one app: every message of the conversations in which an end
    user who called the API left a rating, and how many ratings it cannot follow (by reason)."""
    messages, webapp, gone = {}, 0, 0
    for c in plan.conversations:
        shown = [m for m in c.messages if c.app_version == version and (as_of is None or m.created_at <= as_of)]
        rated = [m for m in shown if rating_at(m, as_of)]
        if not rated:
            continue
        if c.channel == "webapp":
            webapp += len(rated)
        elif c.conversation_id in deleted:
            gone += len(rated)
        else:
            messages.update({m.message_id: m for m in shown})
    return messages, webapp, gone


def by_id(project: Path) -> dict:
    return {m.message_id: m for m in read_messages(open_store(load_config(project)))}


def test_dify_service_api_pull_reads_the_rated_conversations_once_and_counts_what_it_cannot(plan, shipped, monkeypatch):
    version = plan.app_versions[0]
    expected, webapp, _ = service_api_view(plan, version)
    assert webapp > 0 and len(expected) > 50  # the plan has WebApp users' ratings to report
    with DifyServer(plan.corpus, traffic=plan) as server:
        dify_spec(shipped, server, version, monkeypatch)
        first = CliRunner().invoke(
            main, ["--root", str(shipped), "logs", "pull", "--from", "dify", "--version", version]
        )
        assert first.exit_code == 0, first.output
        feedbacks = sum(1 for m in plan.messages() if m.app_version == version and m.rating)
        assert f"pulled {len(expected)} messages and {feedbacks} feedbacks from dify ({version}): " in first.output
        assert f"{len(expected)} new messages, 0 re-rated" in first.output
        assert f"  {webapp} {dify_source.WEBAPP}" in first.output
        assert PARTIAL_COVERAGE in first.output  # never a rate presented as the app's
        for line in output("dify pull"):  # docs/production-loop.md shows this pull's summary, as printed
            assert line in first.output.splitlines(), line

        requests_before = len(server.exchanges)
        second = pull_logs("dify", version=version, root=shipped)
        assert (second.new, second.updated, second.pulled) == (0, 0, 0)
        assert second.unresolved == {dify_source.WEBAPP: webapp} and second.resumed
        # Again: every feedback page, each end user, and one page of each rated conversation (it stops at
        # what is stored).
        asked = [x.request.handler for x in server.exchanges[requests_before:]]
        conversations = len({m.conversation_id for m in expected.values()})
        users = len({(m.user, m.channel) for m in plan.messages() if m.app_version == version and m.rating})
        assert (asked.count("list_messages"), asked.count("end_user")) == (conversations, users)
        cursor = (shipped / ".ragtrack" / "production" / "cursors" / f"dify-{version}.json").read_text()
        assert not any(m.user in cursor for m in plan.messages())  # no end user's identifier kept

    stored = by_id(shipped)
    assert stored.keys() == expected.keys()
    secret = (shipped / ".ragtrack" / "production" / "user-hash-secret").read_text().strip()
    for message_id, m in expected.items():
        got = stored[message_id]
        assert (got.question, got.answer, got.app, got.conversation_id) == (
            m.question,
            m.answer,
            version,
            m.conversation_id,
        )
        assert (got.rating, got.comment) == (m.rating, m.comment if m.rating else None), message_id
        assert got.user == hash_user(m.user, secret) and got.coverage == "rated_conversations"
        assert [c.unit_id for c in got.contexts] == [s.segment_id for s in m.segments]
        assert [c.passage_ids for c in got.contexts] == [[s.passage_id] for s in m.segments], message_id


def test_a_like_turned_dislike_a_day_later_overrides_the_stored_rating(plan, shipped, monkeypatch):
    changed = [m for m in plan.messages() if len(m.rating_history) == 2]
    assert changed and all([r for _, r in m.rating_history] == ["like", "dislike"] for m in changed)
    m = changed[0]
    before, after = m.rating_history[0][0], m.rating_history[1][0]
    with DifyServer(plan.corpus, traffic=plan) as server:
        dify_spec(shipped, server, m.app_version, monkeypatch)
        server.log.as_of = before
        first = pull_logs("dify", version=m.app_version, root=shipped)
        expected, _, _ = service_api_view(plan, m.app_version, before)
        assert first.new == len(expected) and by_id(shipped)[m.message_id].rating == "like"

        server.log.as_of = after
        again = pull_logs("dify", version=m.app_version, root=shipped)
        expected_now, _, _ = service_api_view(plan, m.app_version, after)
        assert again.new == len(expected_now.keys() - expected.keys())
        re_rated = [i for i in expected if rating_at(expected[i], before) != rating_at(expected_now[i], after)]
        assert again.updated == len(re_rated) and m.message_id in re_rated
        got = by_id(shipped)[m.message_id]
        assert (got.rating, got.comment) == ("dislike", m.comment)
        history = sorted(
            (a.value, a.valid) for a in mlflow.get_trace(got.trace_id).info.assessments if a.name == RATING
        )
        assert history == [("dislike", True), ("like", False)]

        # A user re-rates through the real feedback route; the next pull follows.
        target = next(i for i, x in expected_now.items() if rating_at(x, after) == "like")
        reply = httpx.post(
            f"{server.base_url}/messages/{target}/feedbacks",
            json={"rating": "dislike", "user": expected_now[target].user, "content": "not what I asked"},
            headers={"Authorization": f"Bearer app-{m.app_version}"},
        )
        assert reply.json() == {"result": "success"}
        third = pull_logs("dify", version=m.app_version, root=shipped)
        assert (third.new, third.updated) == (0, 1)
        assert (by_id(shipped)[target].rating, by_id(shipped)[target].comment) == ("dislike", "not what I asked")


def test_dify_faults_rate_limits_and_deleted_conversations(plan, shipped, monkeypatch):
    version = plan.app_versions[0]
    as_of = f"{plan.days[0]}T23:59:59Z"  # the first day: a small pull
    with DifyServer(plan.corpus, traffic=plan) as server:
        dify_spec(shipped, server, version, monkeypatch)
        server.log.as_of = as_of
        visible, _, _ = service_api_view(plan, version, as_of)
        gone = next(iter(visible.values())).conversation_id
        server.delete_conversation(gone)
        admin = next(i for i, x in visible.items() if x.conversation_id != gone)
        server.admin_ratings[admin] = "dislike"
        server.inject(Fault("429", 0.0), Fault("500"), Fault("drop"))
        report = pull_logs("dify", version=version, root=shipped)
        served = [x.response.status for x in server.exchanges[:3]]
        assert served == [429, 500, 0]  # each retried: the pull went on

        expected, webapp, deleted = service_api_view(plan, version, as_of, frozenset({gone}))
        assert deleted > 0 and report.new == len(expected)
        want = {dify_source.DELETED: deleted, dify_source.ADMIN: 1, **({dify_source.WEBAPP: webapp} if webapp else {})}
        assert report.unresolved == want
        assert by_id(shipped).keys() == expected.keys()
        assert by_id(shipped)[admin].rating == rating_at(expected[admin], as_of)  # an admin's is not the user's

        monkeypatch.setenv("KEY_" + version.replace("-", "_").upper(), "app-wrong")
        with pytest.raises(RagtrackError, match="401.*is the key the app's API key"):
            pull_logs("dify", version=version, root=shipped)


def test_dify_feedbacks_of_a_forgotten_end_user_or_an_unlisted_message_are_counted_by_reason(
    plan, shipped, monkeypatch
):
    """The two reasons no other test reaches: /end-users answers 404 for a feedback's end user (its
    conversations cannot be asked for), and a rated message its conversation's /messages leaves out (the
    rest of the conversation is still read)."""
    version = plan.app_versions[0]
    as_of = f"{plan.days[0]}T23:59:59Z"
    with DifyServer(plan.corpus, traffic=plan) as server:
        dify_spec(shipped, server, version, monkeypatch)
        server.log.as_of = as_of
        visible, webapp, _ = service_api_view(plan, version, as_of)
        conversations = {m.conversation_id for m in visible.values()}
        users = {}
        for m in visible.values():
            users.setdefault(m.user, set()).add(m.conversation_id)
        # One user whose rated conversations are forgotten with them, another's rated message unlisted.
        forgotten = next(u for u, cs in users.items() if len(cs) == 1)
        server.forgotten_end_users.add(server.end_user_id(version, next(iter(users[forgotten]))))
        unlisted = next(m for m in visible.values() if m.user != forgotten and rating_at(m, as_of))
        server.unlisted.add(unlisted.message_id)

        report = pull_logs("dify", version=version, root=shipped)

        lost = [m for m in visible.values() if m.user == forgotten]
        assert report.unresolved == {
            dify_source.UNKNOWN_USER: sum(rating_at(m, as_of) is not None for m in lost),
            dify_source.MISSING: 1,
            **({dify_source.WEBAPP: webapp} if webapp else {}),
        }
        expected = set(visible) - {m.message_id for m in lost} - {unlisted.message_id}
        assert set(by_id(shipped)) == expected and len(conversations) > 1


def test_dify_pull_pages_resumes_after_a_kill_and_keeps_keys_out(plan, shipped, monkeypatch):
    """Small pages (so every conversation of three or more messages is read through first_id), a pull
    killed after its first writes, and the next one finishing it; the app key, which a user pasted into
    a question, never reaches the store."""
    version = plan.app_versions[0]
    monkeypatch.setattr(dify_source, "FEEDBACK_PAGE", 7)
    monkeypatch.setattr(dify_source, "PAGE", 2)
    monkeypatch.setattr(pull_module, "WRITE_BATCH", 10)
    key = f"app-{version}"
    with DifyServer(plan.corpus, traffic=plan) as server:
        dify_spec(shipped, server, version, monkeypatch)
        headers = {"Authorization": f"Bearer {key}"}
        pasted = httpx.post(
            f"{server.base_url}/chat-messages",
            json={"inputs": {}, "query": f"my key {key} fails, why?", "user": "u-paster", "response_mode": "blocking"},
            headers=headers,
        ).json()
        rated = httpx.post(
            f"{server.base_url}/messages/{pasted['id']}/feedbacks",
            json={"rating": "dislike", "user": "u-paster", "content": f"still {key}"},
            headers=headers,
        )
        assert rated.json() == {"result": "success"}
        expected, webapp, _ = service_api_view(plan, version)
        with pytest.raises(KeyboardInterrupt):
            pull_logs("dify", version=version, root=shipped, progress=killed_after_writes(2))
        before = by_id(shipped)
        assert 10 <= len(before) < len(expected) and before.keys() <= expected.keys() | {pasted["id"]}
        asked = len(server.exchanges)
        report = pull_logs("dify", version=version, root=shipped)
        assert report.resumed and report.new == len(expected) + 1 - len(before)
        assert report.unresolved == {dify_source.WEBAPP: webapp}
        requests = [x.request for x in server.exchanges[asked:]]

    stored = by_id(shipped)
    assert stored.keys() == expected.keys() | {pasted["id"]}
    # Paged: every feedback page (a short one last) and the older messages by first_id; the conversations
    # of three or more messages not read before the kill are whole, so first_id paging found their start.
    feedbacks = sum(1 for m in plan.messages() if m.app_version == version and m.rating) + 1
    assert [r.query.get("page") for r in requests if r.handler == "app_feedbacks"] == [
        str(n) for n in range(1, feedbacks // 7 + 2)
    ]
    long = {m.conversation_id for m in expected.values()} - {m.conversation_id for m in before.values()}
    long = {c for c in long if sum(m.conversation_id == c for m in expected.values()) >= 3}
    assert long and any(r.query.get("first_id") for r in requests if r.handler == "list_messages")
    assert all(m.conversation_id not in long or m.message_id in stored for m in expected.values())
    # The key: redacted in what is stored, nowhere in the store, the cursor or the messages.
    got = stored[pasted["id"]]
    assert (got.question, got.comment, got.rating) == ("my key *** fails, why?", "still ***", "dislike")
    store = open_store(load_config(shipped))
    log = ProductionLog(store)
    traces = store.client.search_traces(locations=[log.experiment_id], include_spans=True, max_results=500)
    assert len(traces) == len(stored) and not any(key in json.dumps(t.to_dict()) for t in traces)
    assert not any(key in p.read_text(errors="replace") for p in (shipped / ".ragtrack").rglob("*") if p.is_file())


def test_the_chinese_traffic_through_dify_with_progress_on_stderr(tmp_path, monkeypatch):
    """The Chinese plan over examples/zh-kb: Chinese questions, answers and comments stored as served,
    segments mapped to the shipped Chinese passages by their text; progress on stderr, the summary on
    stdout."""
    plan = traffic_plan("zh")
    root = tmp_path / "zh"
    shutil.copytree(REPO / "examples" / "zh-kb", root)
    (root / "pipelines").mkdir()
    version = plan.app_versions[1]
    expected, webapp, _ = service_api_view(plan, version)
    with DifyServer(plan.corpus, traffic=plan) as server:
        dify_spec(root, server, version, monkeypatch)
        result = CliRunner().invoke(main, ["--root", str(root), "logs", "pull", "--from", "dify", "--version", version])
    assert result.exit_code == 0, result.output
    conversations = len({m.conversation_id for m in expected.values()})
    assert f"{version}: {conversations}/{conversations} rated conversations read" in result.stderr
    assert f"stored {len(expected)} new messages, 0 re-rated" in result.stderr
    assert "rated conversations read" not in result.stdout and result.stdout.startswith(f"pulled {len(expected)} ")
    likes = sum(rating_at(m, None) == "like" for m in expected.values())
    dislikes = sum(rating_at(m, None) == "dislike" for m in expected.values())
    unrated = len(expected) - likes - dislikes
    assert f"stored for {version}: {len(expected)} messages, {dislikes} disliked, {likes} liked, {unrated} unrated" in (
        result.stdout
    )
    assert (f"  {webapp} {dify_source.WEBAPP}" in result.stdout) == bool(webapp)
    stored = by_id(root)
    assert stored.keys() == expected.keys()
    for message_id, m in expected.items():
        got = stored[message_id]
        assert (got.question, got.answer, got.comment) == (m.question, m.answer, m.comment if m.rating else None)
        assert [c.passage_ids for c in got.contexts] == [[s.passage_id] for s in m.segments], message_id


# ---------------------------------------------------------------------------------------------- RAGFlow
def ragflow_spec(project: Path, server: RagflowServer, version: str, monkeypatch) -> str:
    monkeypatch.setenv("RAGFLOW_KEY", RAGFLOW_KEY)
    (project / "pipelines" / f"{version}.toml").write_text(
        f'[version]\nname = "{version}"\n\n[agent]\nkind = "ragflow"\nbase_url = "{server.base_url}"\n'
        f'api_key_env = "RAGFLOW_KEY"\nchat_id = "{server.chat_of(version)}"\n'
    )
    return version


@pytest.mark.parametrize("old", [False, True], ids=["sessions-api", "v0.2x-sdk-listing"])
def test_ragflow_sessions_are_pulled_whole_incrementally_and_re_rated(plan, shipped, monkeypatch, old):
    version, as_of = plan.app_versions[1], f"{plan.days[3]}T12:00:00Z"
    with RagflowServer(plan.corpus, api_key=RAGFLOW_KEY, traffic=plan, old=old) as server:
        ragflow_spec(shipped, server, version, monkeypatch)
        server.log.as_of = as_of
        expected = {m.message_id: m for m in plan.messages() if m.app_version == version and m.created_at <= as_of}
        first = pull_logs("ragflow", version=version, root=shipped)
        assert (first.pulled, first.new, first.coverage, dict(first.unresolved)) == (
            len(expected),
            len(expected),
            "all",
            {},
        )
        stored = by_id(shipped)
        assert stored.keys() == expected.keys()
        secret = (shipped / ".ragtrack" / "production" / "user-hash-secret").read_text().strip()
        for message_id, m in expected.items():
            got = stored[message_id]
            assert (got.question, got.answer, got.app) == (m.question, m.answer, version), message_id
            rating = rating_at(m, as_of)
            assert (got.rating, got.comment) == (rating, m.comment if rating == "dislike" else None), message_id
            assert got.user == (hash_user(m.user, secret) if m.channel == "api" else None)
            assert [c.passage_ids for c in got.contexts] == [[s.passage_id] for s in m.segments], message_id

        asked = len(server.exchanges)
        again = pull_logs("ragflow", version=version, root=shipped)
        assert (again.new, again.updated) == (0, 0) and len(server.exchanges) - asked == 1  # one page: nothing since

        # The user dislikes a liked answer; and the clock moves on to the plan's end.
        liked = next(i for i, m in expected.items() if rating_at(m, as_of) == "like")
        session = uuid.UUID(expected[liked].conversation_id).hex
        reply = httpx.put(
            f"{server.base_url}/api/v1/chats/{server.chat_of(version)}/sessions/{session}/messages/{liked}/feedback",
            json={"thumbup": False, "feedback": "wrong version"},
            headers={"Authorization": f"Bearer {RAGFLOW_KEY}"},
        ).json()
        assert reply["code"] == 0
        server.log.as_of = None
        server.delete_session(uuid.UUID(plan.messages()[-1].conversation_id).hex)  # gone before it was pulled
        later = pull_logs("ragflow", version=version, root=shipped)
        now = {
            m.message_id: m
            for c in plan.conversations
            if c.app_version == version and c.conversation_id != plan.messages()[-1].conversation_id
            for m in c.messages
        }
        changed = {i for i, m in expected.items() if rating_at(m, as_of) != m.rating} | {liked}
        assert (later.new, later.updated) == (len(now.keys() - expected.keys()), len(changed))
        assert (by_id(shipped)[liked].rating, by_id(shipped)[liked].comment) == ("dislike", "wrong version")


def test_ragflow_pull_pages_through_faults(plan, shipped, monkeypatch):
    """Sessions ten a page, newest updated first, through a rate limit, a server error and a dropped
    connection (each retried); a second pull reads one page and stops at what it has."""
    version = plan.app_versions[0]
    monkeypatch.setattr(ragflow_source, "PAGE", 10)
    with RagflowServer(plan.corpus, api_key=RAGFLOW_KEY, traffic=plan) as server:
        ragflow_spec(shipped, server, version, monkeypatch)
        sessions = len([c for c in plan.conversations if c.app_version == version])
        expected = {m.message_id for m in plan.messages() if m.app_version == version}
        server.inject(Fault("429", 0.0), Fault("500"), Fault("drop"))
        report = pull_logs("ragflow", version=version, root=shipped)
        served = [x.response.status for x in server.exchanges]
        assert served[:3] == [429, 500, 0] and served[3:] == [200] * (sessions // 10 + 1)
        assert (report.pulled, report.new, dict(report.unresolved)) == (len(expected), len(expected), {})
        assert [x.request.query["page"] for x in server.exchanges[3:]] == [str(n) for n in range(1, sessions // 10 + 2)]
        asked = len(server.exchanges)
        again = pull_logs("ragflow", version=version, root=shipped)
        assert (again.new, again.updated, len(server.exchanges) - asked) == (0, 0, 1)
    assert by_id(shipped).keys() == expected


# ---------------------------------------------------------------------------------------------- MLflow
def traces_experiment(project: Path, name: str) -> str:
    """An experiment of the project's store that an app traces into (as Dify's provider would)."""
    store = open_store(load_config(project))
    return store.client.create_experiment(name)


def test_dify_chatbot_traces_are_joined_and_get_every_rating_from_app_feedbacks(plan, shipped, monkeypatch):
    version = plan.app_versions[0]
    with DifyServer(plan.corpus, traffic=plan) as server:
        dify_spec(shipped, server, version, monkeypatch)
        experiment = traces_experiment(shipped, "dify-traces")
        written = write_dify_traces(server.log, version, experiment, "chat")
        write_dify_traces(server.log, plan.app_versions[1], experiment, "chat")  # another app, same experiment
        expected = {m.message_id: m for m in plan.messages() if m.app_version == version}
        assert written == len(expected)
        report = pull_logs("mlflow", experiment="dify-traces", version=version, root=shipped)
        # The whole traffic, WebApp users' messages included: their ratings join by message ID.
        assert (report.pulled, report.new, report.coverage, dict(report.unresolved)) == (
            len(expected),
            len(expected),
            "all",
            {},
        )
        assert (report.disliked, report.liked) == (
            sum(m.rating == "dislike" for m in expected.values()),
            sum(m.rating == "like" for m in expected.values()),
        )
        again = pull_logs("mlflow", experiment="dify-traces", version=version, root=shipped)
        assert (again.new, again.updated) == (0, 0)

        # A user turns a like into a dislike, and another rates an answer no trace holds (tracing was
        # off): the next pull re-rates the one and counts the other.
        headers = {"Authorization": f"Bearer app-{version}"}
        liked = next(m for m in expected.values() if m.rating == "like" and m.channel == "api")
        for message, user in ((liked.message_id, liked.user), (None, "u-untraced")):
            if message is None:
                message = httpx.post(
                    f"{server.base_url}/chat-messages",
                    json={"inputs": {}, "query": "is there a dark mode?", "user": user, "response_mode": "blocking"},
                    headers=headers,
                ).json()["id"]
            reply = httpx.post(
                f"{server.base_url}/messages/{message}/feedbacks",
                json={"rating": "dislike", "user": user, "content": "changed my mind"},
                headers=headers,
            )
            assert reply.json() == {"result": "success"}
        third = pull_logs("mlflow", experiment="dify-traces", version=version, root=shipped)
        assert (third.new, third.updated, dict(third.unresolved)) == (0, 1, {mlflow_source.NO_TRACE: 1})
        expected[liked.message_id] = replace(liked, rating="dislike", comment="changed my mind")
    stored = by_id(shipped)
    assert stored.keys() == expected.keys()
    secret = (shipped / ".ragtrack" / "production" / "user-hash-secret").read_text().strip()
    for message_id, m in expected.items():
        got = stored[message_id]
        assert (got.source, got.app, got.question, got.answer) == ("mlflow", version, m.question, m.answer)
        assert (got.rating, got.comment) == (m.rating, m.comment if m.rating else None), message_id
        session = m.user if m.channel == "api" else str(stable_id("webapp-session", m.user))
        assert got.user == hash_user(session, secret) and got.conversation_id == m.conversation_id
        assert [c.passage_ids for c in got.contexts] == [[s.passage_id] for s in m.segments], message_id


def test_chatflow_and_workflow_traces_and_an_apps_own_traces(plan, shipped, monkeypatch):
    version = plan.app_versions[1]
    as_of = f"{plan.days[3]}T12:00:00Z"
    with DifyServer(plan.corpus, traffic=plan) as server:
        dify_spec(shipped, server, version, monkeypatch)
        server.log.as_of = as_of
        write_dify_traces(server.log, version, traces_experiment(shipped, "chatflow"), "advanced-chat")
        write_dify_traces(server.log, version, traces_experiment(shipped, "workflow"), "workflow")
        report = pull_logs("mlflow", experiment="chatflow", version=version, root=shipped)
        workflow = pull_logs("mlflow", experiment="workflow", app="workflow-app", root=shipped)
    shown = [m for m in plan.messages() if m.app_version == version and m.created_at <= as_of]
    rated = [m for m in shown if rating_at(m, as_of)]
    webapp = sum(m.channel == "webapp" for m in rated)
    assert report.new == workflow.new == len(shown)
    # A chatflow run carries no message ID: its rating is matched through the conversation's /messages,
    # which Dify lists to service API users only.
    assert dict(report.unresolved) == ({dify_source.WEBAPP: webapp} if webapp else {})
    assert report.liked + report.disliked == len(rated) - webapp
    assert (workflow.liked, workflow.disliked, dict(workflow.unresolved)) == (0, 0, {})  # no spec: no ratings
    runs = {str(stable_id("workflow-run", m.message_id)): m for m in shown}
    for got in read_messages(open_store(load_config(shipped)), source="mlflow", app=version):
        m = runs[got.message_id]
        want = rating_at(m, as_of) if m.channel == "api" else None
        assert (got.question, got.answer, got.rating) == (m.question, m.answer, want)
        assert [c.passage_ids for c in got.contexts] == [[s.passage_id] for s in m.segments]
        assert [c.unit_id for c in got.contexts] == [s.segment_id for s in m.segments]

    # An app's own traces: the question in the root span, documents from a RETRIEVER span, the end
    # user's thumbs as HUMAN feedback; re-rated in the store, re-rated by the next pull.
    experiment = traces_experiment(shipped, "my-app")
    m = shown[0]
    root = mlflow.start_span_no_context("chat", inputs={"question": m.question}, experiment_id=experiment)
    span = mlflow.start_span_no_context("search", span_type="RETRIEVER", parent_span=root, inputs={"q": m.question})
    span.end(outputs=[{"page_content": s.text, "metadata": {"chunk_id": s.segment_id}} for s in m.segments])
    root.end(outputs={"answer": m.answer})
    mlflow.flush_trace_async_logging()
    human = AssessmentSource(AssessmentSourceType.HUMAN, "u-1")
    thumbs = mlflow.log_feedback(trace_id=root.trace_id, name="thumbs_up", value=False, source=human, rationale="old")
    own = pull_logs("mlflow", experiment="my-app", root=shipped)
    (got,) = read_messages(open_store(load_config(shipped)), app="my-app")
    assert (own.new, got.message_id, got.question, got.rating, got.comment) == (
        1,
        root.trace_id,
        m.question,
        "dislike",
        "old",
    )
    assert [c.passage_ids for c in got.contexts] == [[s.passage_id] for s in m.segments]
    mlflow.override_feedback(trace_id=root.trace_id, assessment_id=thumbs.assessment_id, value=True, source=human)
    assert pull_logs("mlflow", experiment="my-app", root=shipped).updated == 1
    assert read_messages(open_store(load_config(shipped)), app="my-app")[0].rating == "like"
