"""``logs pull`` against hostile servers (ragtrack.testing.hostile, written apart from the stand-ins), on 127.0.0.1.

The fault campaign of issue 45, kept: junk replies with HTTP 200, one page repeated forever, a reply
dripped a byte a second, a server that never answers, a huge ``Retry-After``, a pull SIGKILLed
mid-write, two pulls at once, a locked store. Each case states the outcome it must have — one
clear error naming the endpoint and the field, or the right messages stored — and every test is
bounded (the servers' waits end when they close; requests have a whole-reply deadline).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ragtrack.api import pull_logs
from ragtrack.config import load_config
from ragtrack.errors import RagtrackError, StoreError
from ragtrack.files import hold_lock, release_lock
from ragtrack.llm.client import RetryPolicy
from ragtrack.production import sources
from ragtrack.production.sources import dify as dify_source
from ragtrack.testing.hostile import (
    DifyApp,
    HostileServer,
    RagflowApp,
    Reply,
    drip,
    endless,
    junk,
    repeat_first_page,
    retry_after,
    silence,
)
from ragtrack.tracking.export_failures import cause
from ragtrack.tracking.production import read_messages
from ragtrack.tracking.store import open_store

REPO = Path(__file__).resolve().parent.parent
KEY_ENV = "HOSTILE_DIFY_KEY"


@pytest.fixture(scope="module", autouse=True)
def quick_retries():
    """Retries as a pull makes them, on a shorter clock: two attempts, backoff and Retry-After capped at
    1 s (the policy's shape is what is under test, not its 30 s); the app key in the environment."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dify_source, "PULL_RETRY", RetryPolicy(max_attempts=2, base_delay_s=0.1, max_delay_s=1.0))
        patch.setenv(KEY_ENV, "app-hostile-key")
        yield


def dify_spec(project: Path, server: HostileServer, timeout_s: float = 3.0) -> str:
    (project / "pipelines" / "hostile.toml").write_text(
        f'[version]\nname = "hostile"\n\n[agent]\nkind = "dify"\nbase_url = "{server.base_url}/v1"\n'
        f'api_key_env = "{KEY_ENV}"\ntimeout_s = {timeout_s}\n'
    )
    return "hostile"


def ragflow_spec(project: Path, server: HostileServer, chat_id: str) -> str:
    (project / "pipelines" / "hostile-rf.toml").write_text(
        f'[version]\nname = "hostile-rf"\n\n[agent]\nkind = "ragflow"\nbase_url = "{server.base_url}"\n'
        f'api_key_env = "{KEY_ENV}"\nchat_id = "{chat_id}"\ntimeout_s = 3\n'
    )
    return "hostile-rf"


def stored(project: Path) -> dict[str, tuple[str | None, str | None]]:
    """Message ID → (rating, comment), of every production message in the store."""
    return {m.message_id: (m.rating, m.comment) for m in read_messages(open_store(load_config(project)))}


def small_app() -> DifyApp:
    """Three conversations (5, 3 and 2 messages), four ratings."""
    app = DifyApp()
    for conversation, size in (("c1", 5), ("c2", 3), ("c3", 2)):
        app.conversation(conversation, size)
    for message, rating in (("c1-m00001", "like"), ("c1-m00004", "dislike"), ("c2-m00000", "like")):
        app.rate(message, rating)
    app.rate("c3-m00001", "dislike")
    return app


# ---------------------------------------------------------------- 1. junk replies change nothing stored

JUNK = [
    ("/v1/app/feedbacks", {"status": "maintenance"}, "/app/feedbacks page 1: malformed reply: data should be a list"),
    ("/v1/app/feedbacks", {"data": "oops"}, "/app/feedbacks page 1: malformed reply: data should be a list"),
    ("/v1/app/feedbacks", [], "/app/feedbacks page 1: malformed reply: the reply should be an object"),
    ("/v1/messages", {"data": None}, "/messages (conversation c1, page 1): malformed reply: data should be a list"),
    ("/v1/messages", {"data": [], "has_more": "no"}, "malformed reply: has_more should be true/false"),
    ("/v1/messages", {"data": [{"id": None}], "has_more": False}, "data[0]: malformed reply: id should be a string"),
    ("/v1/end-users/", {"type": "service_api"}, "/end-users/eu-c1: malformed reply: session_id should be a string"),
    ("/v1/end-users/", b"<html>maintenance</html>", "reply is not JSON"),
]


@pytest.fixture(scope="module")
def pulled(tmp_path_factory):
    """A project after one good pull of :func:`small_app`, and the app changed since (a new message in
    c1, c1-m00001 turned dislike, c2-m00000's like withdrawn): (server, app, project, what is stored).
    A test copies the project; the server is shared."""
    from tests.conftest import make_project

    app = small_app()
    project = make_project(tmp_path_factory.mktemp("pulled") / "project")
    with HostileServer(app) as server:
        dify_spec(project, server)
        first = pull_logs("dify", version="hostile", root=project)
        assert (first.new, first.liked, first.disliked) == (10, 2, 2)
        app.conversation("c1", 6)
        app.rate("c1-m00001", "dislike")
        app.rate("c2-m00000", None)
        yield server, app, project, stored(project)


def copy_of(project: Path, tmp_path: Path) -> Path:
    shutil.copytree(project, tmp_path / "copy")
    return tmp_path / "copy"


@pytest.mark.parametrize(("path", "body", "error"), JUNK, ids=[f"{p}-{n}" for n, (p, _, _) in enumerate(JUNK)])
def test_a_junk_reply_stops_the_pull_with_one_error_and_changes_nothing_stored(pulled, tmp_path, path, body, error):
    """After a good pull the app changed (a new message, a rating changed, one withdrawn); a pull
    meeting a junk reply with HTTP 200 on ``path`` fails naming the endpoint and the field, and the
    store is exactly as it was: no rating withdrawn, no message added."""
    server, _, template, before = pulled
    project = copy_of(template, tmp_path)
    server.misbehave(path, junk(body))
    try:
        with pytest.raises(RagtrackError) as raised:
            pull_logs("dify", version="hostile", root=project)
    finally:
        server.misbehave(path, None)
    assert error in str(raised.value) and f"Dify at {server.base_url}/v1" in str(raised.value)
    assert stored(project) == before


MALFORMED_RECORDS = [
    ("/v1/app/feedbacks", {"data": [{"rating": "like", "from_source": "user"}]}, "feedbacks skipped, message_id"),
    (
        "/v1/app/feedbacks",
        {"data": [{"id": "f", "message_id": 7, "from_source": "user"}]},
        "feedbacks skipped, conversation_id",
    ),
]


@pytest.mark.parametrize(("path", "body", "skip"), MALFORMED_RECORDS, ids=["no-message-id", "no-conversation"])
def test_a_listing_with_a_malformed_record_skips_it_counted_and_withdraws_no_rating(pulled, tmp_path, path, body, skip):
    """A reply in the documented shape holding a record whose field is no value: the record is a counted,
    named skip (the field validation's rule), and the listing is no well-formed answer, so it withdraws
    nothing — the store keeps every rating it had (a junk page of one half-valid record used to erase them)."""
    server, _, template, before = pulled
    project = copy_of(template, tmp_path)
    server.misbehave(path, junk(body))
    try:
        report = pull_logs("dify", version="hostile", root=project)
    finally:
        server.misbehave(path, None)
    assert any(skip in reason for reason in report.unresolved), report.unresolved
    assert stored(project) == before


def test_once_the_server_is_sane_the_next_pull_applies_every_change(pulled, tmp_path):
    """The withdrawn rating goes from a well-formed listing that leaves it out; the new message and the
    changed rating arrive."""
    server, _, template, before = pulled
    project = copy_of(template, tmp_path)
    again = pull_logs("dify", version="hostile", root=project)
    after = stored(project)
    assert again.new == 1 and len(after) == 11 and before["c2-m00000"][0] == "like"
    assert after["c1-m00001"][0] == "dislike" and after["c2-m00000"][0] is None and after["c1-m00005"][0] is None


def test_feedbacks_are_withdrawn_only_from_an_explicit_well_formed_listing(project):
    """An empty, well-formed ``{"data": []}`` is the platform saying nobody rated anything any more:
    every rating is withdrawn. That is the only way ratings go (the junk cases above change nothing)."""
    app = small_app()
    with HostileServer(app) as server:
        version = dify_spec(project, server)
        pull_logs("dify", version=version, root=project)
        app.ratings.clear()
        report = pull_logs("dify", version=version, root=project)
    assert (report.liked, report.disliked, report.updated) == (0, 0, 4)
    assert {r for r, _ in stored(project).values()} == {None}


# ---------------------------------------------------------------- 2. resume finds the gaps; SIGKILL loses nothing


def pull_killed_at_trace(project: Path, version: str, n: int, timeout_s: float = 600) -> subprocess.CompletedProcess:
    """``ragtrack logs pull`` in a process SIGKILLed as it hands its ``n``-th trace to the exporter."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "ragtrack.testing.kill", f"trace:{n}", "--root", str(project)]
    return subprocess.run(
        [*cmd, "logs", "pull", "--from", "dify", "--version", version],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def test_sigkill_at_several_points_of_a_long_conversation_loses_nothing(project):
    """A 600-message conversation (as in the campaign, where a cut write kept 2 and the next pull ended
    with 595 of 600), pulled by processes SIGKILLed mid-write at three points — each in the middle of a
    chunk, whose traces before the kill have their info and rating stored and none of their spans —
    and then finished: every message stored once, checked by ID, both ratings kept."""
    app = DifyApp()
    messages = app.conversation("long", 600)
    app.rate("long-m00007", "like")
    app.rate("long-m00598", "dislike")
    with HostileServer(app) as server:
        version = dify_spec(project, server)
        counts = []
        for n in (40, 150, 250):  # counted in each process: what it writes, after what is stored
            killed = pull_killed_at_trace(project, version, n)
            assert killed.returncode == -9, killed.stderr[-2000:]
            counts.append(len(stored(project)))
        report = pull_logs("dify", version=version, root=project)
    after = stored(project)
    assert counts == [0, 100, 300]  # whole chunks only: a chunk cut before its spans is not kept
    assert sorted(after) == [m.id for m in messages] and report.new == 600 - counts[-1]
    assert after["long-m00007"][0] == "like" and after["long-m00598"][0] == "dislike"
    assert (report.stored, report.liked, report.disliked) == (600, 1, 1)


def test_a_resume_fills_gaps_anywhere_not_only_above_the_newest_stored_message(project):
    """The store holds an out-of-order subset of a conversation (what a cut write left before the
    writes were ordered: its newest message, and two old ones); the next pull reads the conversation
    whole, since no pull marked it complete, and stores exactly the rest."""
    app = DifyApp()
    messages = app.conversation("c", 250)
    app.rate("c-m00249", "like")
    with HostileServer(app) as server:
        version = dify_spec(project, server)
        kept = {messages[3].id, messages[100].id, messages[249].id}
        server.misbehave("/v1/messages", lambda q, r: _only(app, q, kept))
        pull_logs("dify", version=version, root=project)
        (project / ".ragtrack" / "production" / "cursors" / "dify-hostile.json").unlink()
        assert sorted(stored(project)) == sorted(kept)
        server.misbehave("/v1/messages", None)
        report = pull_logs("dify", version=version, root=project)
    assert report.new == 247 and sorted(stored(project)) == [m.id for m in messages]


def _only(app: DifyApp, query: dict[str, str], ids: set[str]) -> Reply:
    """The conversation as one page holding only ``ids``: what a cut, unordered write left in the store."""
    whole = app.messages({**query, "limit": "100000"}).body
    return Reply({**whole, "data": [m for m in whole["data"] if m["id"] in ids]})


@pytest.mark.slow
def test_sigkill_in_a_10000_message_conversation_loses_nothing(project):
    """The campaign's 10,000-message conversation (where MLflow's export queue dropped 9,174 traces):
    one pull SIGKILLed mid-write at its 1,500th trace, the next finishing it; every message stored
    once, by count and by ID. Slow — writing 10,000 traces to SQLite is the point: 302 CPU-s in all
    (535 s wall beside other tests; MLflow's store takes about 25 ms of CPU a trace); the
    kill-at-several-points test above covers the same machinery on 600 in a fraction of it."""
    app = DifyApp()
    messages = app.conversation("huge", 10_000)
    app.rate("huge-m09999", "dislike")
    with HostileServer(app) as server:
        version = dify_spec(project, server, timeout_s=60)
        killed = pull_killed_at_trace(project, version, 1_500, timeout_s=3600)
        assert killed.returncode == -9, killed.stderr[-2000:]
        cut = len(stored(project))
        report = pull_logs("dify", version=version, root=project)
    after = stored(project)
    # Killed before the end: what the killed pull left readable is at most what it handed over. (In the
    # stop-45 CI run it was 0 — the chunks handed over were not yet read back whole — which is still to
    # explain; the resume's count and IDs below are what "loses nothing" means.)
    assert 0 <= cut < 1_500 and report.new == 10_000 - cut
    assert len(after) == 10_000 and sorted(after) == [m.id for m in messages]
    assert after["huge-m09999"][0] == "dislike"


# ---------------------------------------------------------------- 3. bounded paging and waits

PAGING = [
    ("/v1/app/feedbacks", repeat_first_page(), "/app/feedbacks: page 2 only repeats items already read"),
    ("/v1/messages", repeat_first_page(), "of conversation c1: page 2 only repeats items already read"),
    (
        "/v1/app/feedbacks",
        endless(lambda n: {"data": [_feedback(f"{n}-{i}") for i in range(100)]}),
        "/app/feedbacks: still paging after 5 pages; stopped",
    ),
]


def _feedback(n: str) -> dict:
    return {
        "id": f"f{n}",
        "message_id": f"m{n}",
        "conversation_id": "c1",
        "rating": "like",
        "content": None,
        "from_source": "user",
        "from_end_user_id": "eu-c1",
    }


@pytest.mark.parametrize(("path", "how", "error"), PAGING, ids=["feedbacks-repeat", "messages-repeat", "endless"])
def test_a_listing_that_never_ends_stops_with_one_error(project, monkeypatch, path, how, error):
    """Dify's feedbacks and messages: a page repeated forever stops at the second; a listing of ever new
    pages stops at the cap (5 here, 10,000 in use). Nothing is stored."""
    monkeypatch.setattr(sources, "MAX_PAGES", 5)
    monkeypatch.setattr(dify_source, "PAGE", 2)  # c1's five messages take three pages
    app = small_app()
    for n in range(150):  # two pages of feedbacks
        app.conversation(f"x{n:03d}", 1)
        app.rate(f"x{n:03d}-m00000", "like")
    with HostileServer(app) as server:
        server.misbehave(path, how)
        with pytest.raises(RagtrackError, match=error):
            pull_logs("dify", version=dify_spec(project, server), root=project)
    assert stored(project) == {}


def test_ragflow_sessions_repeated_forever_stop_with_one_error(project):
    app = RagflowApp("chat-1")
    for n in range(100):  # one full page
        app.session(f"s{n:03d}", 1, 1_733_000_000 + n)
    with HostileServer(app) as server:
        version = ragflow_spec(project, server, "chat-1")
        server.misbehave("/api/v1/chats/", repeat_first_page())
        with pytest.raises(RagtrackError, match="sessions: page 2 only repeats items already read"):
            pull_logs("ragflow", version=version, root=project)
        assert stored(project) == {}
        server.misbehave("/api/v1/chats/", junk({"code": 0, "data": {"sessions": []}}))
        with pytest.raises(RagtrackError, match="sessions page 1: malformed reply: data should be a list"):
            pull_logs("ragflow", version=version, root=project)
        server.misbehave("/api/v1/chats/", None)
        assert pull_logs("ragflow", version=version, root=project).new == 100


WAITS = [
    ("drip", drip(0.5), "no whole reply within 1.5s (it kept trickling in)"),
    ("silent", silence(), "no reply within 1.5s"),
]


@pytest.mark.parametrize(("name", "how", "error"), WAITS, ids=[w[0] for w in WAITS])
def test_a_reply_that_never_completes_is_given_up_on_within_the_deadline(project, name, how, error):
    """A byte every half second (each read gets data, so a per-read timeout never trips) and silence:
    each attempt ends at the whole-reply deadline (the spec's timeout_s, 1.5 s), two attempts, one error."""
    with HostileServer(small_app()) as server:
        server.misbehave("/v1/app/feedbacks", how)
        started = time.monotonic()
        with pytest.raises(RagtrackError, match=re.escape(error)):
            pull_logs("dify", version=dify_spec(project, server, timeout_s=1.5), root=project)
        took = time.monotonic() - started
    assert took < 20, took  # two attempts of 1.5 s and the pull's start-up on a busy machine


def test_a_huge_retry_after_is_capped_and_said(project):
    """``Retry-After: 86400`` once: the pull says it waits the cap (1 s here, 30 s in use), not a day,
    then finishes."""
    lines: list[str] = []
    with HostileServer(small_app()) as server:
        server.misbehave("/v1/app/feedbacks", retry_after(86_400))
        started = time.monotonic()
        report = pull_logs("dify", version=dify_spec(project, server), root=project, progress=lines.append)
        took = time.monotonic() - started
    said = f"{server.base_url}/v1/app/feedbacks asked to wait 86400 s (Retry-After); waiting 1 s at most"
    assert any(line.startswith(said) for line in lines) and report.new == 10 and took < 30


def test_source_uri_to_a_silent_server_is_given_up_on(project):
    """``--from mlflow --source-uri`` to a server that never answers: one error within a bounded time
    (it hung past 200 s)."""
    with HostileServer(small_app()) as server:
        server.misbehave("/", silence())
        started = time.monotonic()
        with pytest.raises(RagtrackError, match="no reply"):
            pull_logs("mlflow", experiment="app-traces", source_uri=server.base_url, root=project)
    assert time.monotonic() - started < 30


# ---------------------------------------------------------------- 4. two pulls at once; a locked store


def test_a_second_pull_of_the_same_source_refuses_while_one_runs(project):
    """The lock beside the cursor (the eval checkpoint's pattern) is held by a running pull: the
    second refuses at once, storing nothing; once it is let go the pull runs."""
    with HostileServer(small_app()) as server:
        version = dify_spec(project, server)
        cursor = project / ".ragtrack" / "production" / "cursors" / "dify-hostile.json"
        holder = hold_lock(f"{cursor}.lock", "held by the test")
        try:
            with pytest.raises(RagtrackError, match="another pull of dify hostile is running in this project"):
                pull_logs("dify", version=version, root=project)
            assert stored(project) == {}
        finally:
            release_lock(holder)
        assert pull_logs("dify", version=version, root=project).new == 10
    assert not Path(f"{cursor}.lock").exists()


@pytest.mark.parametrize(
    ("said", "reason"),
    [
        (["(sqlite3.OperationalError) database is locked"], "was locked by another writer"),
        (["sqlite3.OperationalError: database or disk is full"], "the disk is full"),
        (["[Errno 28] No space left on device: '/m/artifacts'"], "the disk is full"),
        (["Failed to log trace: connection refused"], "MLflow said: Failed to log trace: connection refused"),
        ([], "MLflow gave no reason"),
    ],
)
def test_a_locked_sqlite_store_is_not_called_a_full_disk(said, reason):
    """What the store said, as SQLite and the OS word it: the lock, a full disk, anything else quoted."""
    assert reason in cause(said)
    assert ("a full disk?" in cause(said)) is False


def test_a_store_locked_by_another_process_is_reported_as_locked(project):
    """A real SQLite lock: another connection holds the store's database in an exclusive transaction
    while the pull re-rates; the error says locked, not a full disk."""
    import sqlite3

    app = small_app()
    with HostileServer(app) as server:
        version = dify_spec(project, server)
        pull_logs("dify", version=version, root=project)
        app.rate("c2-m00000", "dislike")
        database = project / "mlruns" / "mlflow.db"
        other = sqlite3.connect(database, timeout=0)
        other.execute("BEGIN EXCLUSIVE")
        said = refused_while_locked(project, version, other)
    assert "not a full disk" in said


def refused_while_locked(project: Path, version: str, other) -> str:
    """The one error of a pull while ``other`` (a sqlite3 connection) holds the store's lock, let go after."""
    try:
        with pytest.raises(StoreError, match="locked by another writer") as raised:
            pull_logs("dify", version=version, root=project)
    finally:
        other.rollback()
        other.close()
    return str(raised.value)


def test_new_messages_written_while_another_connection_holds_the_write_lock_are_reported_as_locked(project):
    """A real SQLite lock on the write itself: once the pull has opened the store and is reading the
    conversations, another connection takes the store's write lock (readers still read); SQLite waits
    20 s, then the error says locked, none of the messages is stored, and the cursor does not move, so
    the next pull stores them all."""
    import sqlite3

    app = small_app()

    def lock_then_answer(query: dict[str, str], _) -> Reply:
        if not other.in_transaction:
            other.execute("BEGIN IMMEDIATE")
        return app.messages(query)

    with HostileServer(app) as server:
        version = dify_spec(project, server)
        assert stored(project) == {}  # the store and its production experiment exist
        other = sqlite3.connect(project / "mlruns" / "mlflow.db", timeout=0, check_same_thread=False)
        server.misbehave("/v1/messages", lock_then_answer)
        said = refused_while_locked(project, version, other)
        assert "kept no trace of 10 of 10 production messages after 1 attempt(s)" in said
        assert stored(project) == {}
        server.misbehave("/v1/messages", None)
        report = pull_logs("dify", version=version, root=project)
    assert report.new == len(stored(project)) == 10
