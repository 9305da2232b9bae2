"""The fault campaign's odd values (issue 45, cases 5 and 6), each with the outcome it must have.

Every pull here runs in-process over real HTTP on 127.0.0.1 against the servers of
:mod:`ragtrack.testing.hostile_values` (written apart from the platform stand-ins: they hand out
exactly the records a test builds) into a real MLflow store of the tiny project. A value no field can
hold is one error naming the field, or a skip counted under a reason naming the field — never a
traceback, never a message filed in 1970, never a request outside the API's path.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from pathlib import Path

import mlflow
import pytest
from click.testing import CliRunner

from ragtrack.api import pull_logs
from ragtrack.api.production import cursor_path
from ragtrack.cli import main
from ragtrack.config import load_config
from ragtrack.errors import InputError, RagtrackError
from ragtrack.production.sources.dify import UNKNOWN_USER
from ragtrack.production.sources.jsonl import read_records
from ragtrack.testing.hostile_values import (
    BAD_TIMES,
    Digits,
    HostileDify,
    HostileRagflow,
    end_user,
    feedback,
    message,
    session,
    turn,
)
from ragtrack.tracking.production import read_messages
from ragtrack.tracking.store import open_store
from tests.conftest import make_project

KEY = "app-hostile-5b1c"
AT_ISO = "2024-06-12T10:00:00Z"  # hostile_values.AT
RANGE = "out of range (before 2000, or more than a day ahead of this machine's clock)"
NOT_ISO = "not an ISO 8601 time such as 2025-03-01T09:30:00Z"
#: Each campaign time with the reason it is refused for (the value never shows in a reason).
TIME_REASONS = {
    "day-month-ambiguous": NOT_ISO,
    "nan": "not a time (a number that is not finite)",
    "1e20": RANGE,
    "zero": RANGE,
    "negative": RANGE,
    "yesterday": NOT_ISO,
    "year-1-with-offset": RANGE,
    "year-9999-with-offset": RANGE,
}
NOT_ID = "not an identifier (a string or an integer)"


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Path:
    """One project and store for the module (creating an MLflow store is most of a small pull's time):
    each test pulls as an app of its own (:func:`app`), and reads back only that app's messages."""
    return make_project(tmp_path_factory.mktemp("hostile") / "project")


@pytest.fixture
def app(request) -> str:
    """The test's own version spec name, the app its messages are stored under."""
    return "h-" + hashlib.sha256(request.node.name.encode()).hexdigest()[:12]


def write_spec(project: Path, app: str, server, kind: str) -> None:
    chat = f'chat_id = "{server.chat_id}"\n' if kind == "ragflow" else ""
    (project / "pipelines" / f"{app}.toml").write_text(
        f'[version]\nname = "{app}"\n\n[agent]\nkind = "{kind}"\nbase_url = "{server.base_url}"\n'
        f'api_key_env = "HOSTILE_KEY"\n{chat}'
    )


def pulled(kind: str, project: Path, app: str, server, monkeypatch, lines: list[str] | None = None):
    """``ragtrack logs pull --from KIND --version APP`` in-process, the key in HOSTILE_KEY."""
    monkeypatch.setenv("HOSTILE_KEY", KEY)
    write_spec(project, app, server, kind)
    return pull_logs(kind, version=app, root=project, progress=(lines if lines is not None else []).append)


def stored(project: Path, app: str) -> dict:
    return {m.message_id: m for m in read_messages(open_store(load_config(project)), app=app)}


def only_under(server, prefix: str) -> None:
    paths = [x.request.path for x in server.exchanges]
    assert paths and all(p.startswith(prefix) for p in paths), paths


# ------------------------------------------------------------------ times


@pytest.mark.parametrize("case", list(BAD_TIMES))
def test_a_dify_message_time_that_is_no_time_skips_that_message_counted_by_field(shared, app, monkeypatch, case):
    messages = [message("m-1"), message("m-2", created_at=BAD_TIMES[case])]
    with HostileDify(KEY, [feedback("m-1")], [end_user()], messages) as server:
        report = pulled("dify", shared, app, server, monkeypatch)
    assert report.unresolved == Counter({f"messages skipped, created_at: {TIME_REASONS[case]}": 1})
    held = stored(shared, app)
    assert list(held) == ["m-1"] and held["m-1"].created_at == AT_ISO and held["m-1"].rating == "like"


@pytest.mark.parametrize(
    "value",
    [1718186400, 1718186400123, "2024-06-12T18:00:00+08:00", "2024-06-12T10:00:00", "2024-06-12T10:00:00.5Z"],
    ids=["unix-seconds", "unix-ms", "iso-offset", "iso-naive-is-utc", "iso-fraction"],
)
def test_a_dify_message_time_in_each_accepted_form_is_stored_in_utc(shared, app, monkeypatch, value):
    with HostileDify(KEY, [feedback("m-1")], [end_user()], [message("m-1", created_at=value)]) as server:
        report = pulled("dify", shared, app, server, monkeypatch)
    assert (report.new, report.unresolved) == (1, Counter())
    (held,) = stored(shared, app).values()
    assert held.created_at == AT_ISO
    assert mlflow.get_trace(held.trace_id).info.request_time == 1718186400000


@pytest.mark.parametrize("case", ["yesterday", "zero", "nan", "year-9999-with-offset"])
def test_a_ragflow_session_whose_update_time_is_no_time_is_skipped_counted(shared, app, monkeypatch, case):
    sessions = [session("s-1", turn("a-1")), session("s-2", turn("a-2"), update_time=BAD_TIMES[case])]
    with HostileRagflow(KEY, "chat-1", sessions) as server:
        report = pulled("ragflow", shared, app, server, monkeypatch)
    assert report.unresolved == Counter({f"sessions skipped, update_time: {TIME_REASONS[case]}": 1})
    assert list(stored(shared, app)) == ["a-1"]


@pytest.mark.parametrize("case", ["day-month-ambiguous", "negative", "year-1-with-offset"])
def test_a_ragflow_answer_whose_time_is_no_time_is_skipped_never_filed_in_1970(shared, app, monkeypatch, case):
    sessions = [session("s-1", turn("a-1"), turn("a-2", created_at=BAD_TIMES[case]))]
    with HostileRagflow(KEY, "chat-1", sessions) as server:
        report = pulled("ragflow", shared, app, server, monkeypatch)
    assert report.unresolved == Counter({f"answers skipped, created_at: {TIME_REASONS[case]}": 1})
    held = stored(shared, app)
    assert list(held) == ["a-1"] and held["a-1"].created_at == AT_ISO


@pytest.mark.parametrize("saved", ["abc", "future"])
def test_a_ragflow_cursor_that_holds_no_usable_time_is_ignored_and_every_session_read(shared, app, monkeypatch, saved):
    value = "abc" if saved == "abc" else int(time.time() * 1000) + 10 * 86_400_000
    with HostileRagflow(KEY, "chat-1", [session("s-1", turn("a-1")), session("s-2", turn("a-2"))]) as server:
        path = cursor_path(load_config(shared), "ragflow", app)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"update_time": value}))
        lines: list[str] = []
        report = pulled("ragflow", shared, app, server, monkeypatch, lines)
    assert (report.pulled, report.new) == (2, 2)  # not "0 sessions read", forever
    reason = "is not a time" if saved == "abc" else f"is {RANGE}"
    assert any(f"the saved cursor is ignored (its update_time {reason}" in line for line in lines), lines
    assert json.loads(path.read_text()) == {"update_time": 1718186400000}


# ------------------------------------------------------------------ identifiers


@pytest.mark.parametrize("known", [False, True], ids=["unknown-to-dify", "known-to-dify"])
def test_an_end_user_id_is_one_encoded_path_segment_and_no_request_leaves_v1(shared, app, monkeypatch, known):
    hostile = "../../app/feedbacks?x="
    users = [end_user(hostile)] if known else [end_user()]
    with HostileDify(KEY, [feedback("m-1", end_user_id=hostile)], users, [message("m-1")]) as server:
        report = pulled("dify", shared, app, server, monkeypatch)
    only_under(server, "/v1/")
    asked = [x.request.path for x in server.exchanges if x.request.handler == "end_user_route"]
    assert asked == ["/v1/end-users/..%2F..%2Fapp%2Ffeedbacks%3Fx%3D"]
    assert [x.request.handler for x in server.exchanges].count("feedbacks_route") == 1
    if known:
        assert (report.new, report.unresolved, list(stored(shared, app))) == (1, Counter(), ["m-1"])
    else:
        assert (report.new, report.unresolved) == (0, Counter({UNKNOWN_USER: 1}))


@pytest.mark.parametrize("digits", [Digits("9" * 5000), "9" * 5000], ids=["json-number", "json-string"])
def test_a_5000_digit_message_id_skips_its_feedback_and_message_counted(shared, app, monkeypatch, digits):
    feedbacks = [feedback("m-1"), feedback(digits)]
    with HostileDify(KEY, feedbacks, [end_user()], [message("m-1"), message(digits)]) as server:
        report = pulled("dify", shared, app, server, monkeypatch)
    assert report.unresolved == Counter(
        {
            "feedbacks skipped, message_id: longer than 128 characters": 1,
            "messages skipped, id: longer than 128 characters": 1,
        }
    )
    assert list(stored(shared, app)) == ["m-1"]


@pytest.mark.parametrize("conversation", [{"id": "c-1"}, ["c-1"], None, ""], ids=["object", "list", "null", "empty"])
def test_a_conversation_id_that_is_no_id_is_never_stored_as_a_python_repr(shared, app, monkeypatch, conversation):
    feedbacks = [feedback("m-1"), feedback("m-2", conversation_id=conversation)]
    with HostileDify(KEY, feedbacks, [end_user()], [message("m-1")]) as server:
        report = pulled("dify", shared, app, server, monkeypatch)
    reason = "empty" if conversation == "" else NOT_ID
    assert report.unresolved == Counter({f"feedbacks skipped, conversation_id: {reason}": 1})
    assert [m.conversation_id for m in stored(shared, app).values()] == ["c-1"]


def test_a_ragflow_session_id_that_is_no_id_is_skipped_counted(shared, app, monkeypatch):
    sessions = [session("s-1", turn("a-1")), session({"id": "s-2"}, turn("a-2"))]
    with HostileRagflow(KEY, "chat-1", sessions) as server:
        report = pulled("ragflow", shared, app, server, monkeypatch)
    assert report.unresolved == Counter({f"sessions skipped, id: {NOT_ID}": 1})
    assert [m.conversation_id for m in stored(shared, app).values()] == ["s-1"]


# ------------------------------------------------------------------ ratings


@pytest.mark.parametrize("rating", [5, "LIKE", True, "thumbs_up"])
def test_a_dify_rating_that_is_no_like_or_dislike_is_a_counted_skip(shared, app, monkeypatch, rating):
    feedbacks = [feedback("m-1"), feedback("m-2", rating=rating)]
    with HostileDify(KEY, feedbacks, [end_user()], [message("m-1"), message("m-2")]) as server:
        report = pulled("dify", shared, app, server, monkeypatch)
    assert report.unresolved == Counter({"feedbacks skipped, rating: not a rating (like, dislike or null)": 1})
    held = stored(shared, app)
    assert (held["m-1"].rating, held["m-2"].rating) == ("like", None)  # m-2 read (its conversation is rated)
    assert (report.liked, report.disliked) == (1, 0)


@pytest.mark.parametrize("thumb", [5, "yes"])
def test_a_ragflow_thumbup_that_is_no_boolean_keeps_the_answer_unrated_counted(shared, app, monkeypatch, thumb):
    sessions = [session("s-1", turn("a-1", thumbup=False, feedback="wrong"), turn("a-2", thumbup=thumb))]
    with HostileRagflow(KEY, "chat-1", sessions) as server:
        report = pulled("ragflow", shared, app, server, monkeypatch)
    reason = "ratings skipped, thumbup: not a thumbs up or down (true, false or null)"
    assert report.unresolved == Counter({reason: 1})
    held = stored(shared, app)
    assert (held["a-1"].rating, held["a-1"].comment, held["a-2"].rating) == ("dislike", "wrong", None)


# ------------------------------------------------------------------ texts and keys


def test_a_lone_surrogate_is_stored_as_a_replacement_character_and_the_next_pull_works(shared, app, monkeypatch):
    messages = [message("m-1", query="why\ud800 so slow?", answer="because\udfff.")]
    feedbacks = [feedback("m-1", rating="dislike", content="bad\ud83d")]
    with HostileDify(KEY, feedbacks, [end_user(session_id="user\udc00")], messages) as server:
        first = pulled("dify", shared, app, server, monkeypatch)
        second = pulled("dify", shared, app, server, monkeypatch)
    assert (first.new, first.unresolved, second.new, second.unresolved) == (1, Counter(), 0, Counter())
    (held,) = stored(shared, app).values()
    assert (held.question, held.answer, held.comment) == ("why\ufffd so slow?", "because\ufffd.", "bad\ufffd")
    assert held.user and held.rating == "dislike"


def test_a_non_ascii_key_is_one_error_naming_the_variable_never_the_key(project, monkeypatch):
    with HostileDify(KEY, [feedback("m-1")], [end_user()], [message("m-1")]) as server:
        monkeypatch.setenv("HOSTILE_KEY", "app-kéy-secret")
        write_spec(project, "hostile-dify", server, "dify")
        result = CliRunner().invoke(
            main, ["--root", str(project), "logs", "pull", "--from", "dify", "--version", "hostile-dify"]
        )
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: ") and len(result.output.strip().splitlines()) == 1, result.output
    assert "agent.api_key_env: HOSTILE_KEY holds U+00E9 at character 6: an API key is printable ASCII" in result.output
    assert "kéy" not in result.output and "secret" not in result.output
    assert server.exchanges == []


# ------------------------------------------------------------------ exports and the command line


@pytest.mark.parametrize("case", list(BAD_TIMES))
def test_a_jsonl_time_that_is_no_time_is_one_error_naming_file_line_and_field(tmp_path, case):
    row = {"question": "q?", "answer": "a.", "contexts": [], "created_at": BAD_TIMES[case], "app_version": "v1"}
    export = tmp_path / "export.jsonl"
    export.write_text(json.dumps(row) + "\n")
    with pytest.raises(InputError) as e:
        read_records(export)
    assert str(e.value).startswith(f"{export}:1: created_at: {TIME_REASONS[case]}, got ")


def test_a_jsonl_message_id_too_long_or_with_spaces_is_refused_by_line(tmp_path):
    rows = [
        {"question": "q?", "answer": "a.", "contexts": [], "created_at": AT_ISO, "app_version": "v1", "message_id": i}
        for i in ("9" * 5000, "m 2")
    ]
    export = tmp_path / "export.jsonl"
    export.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(InputError) as e:
        read_records(export)
    assert f"{export}:1: message_id: longer than 128 characters" in str(e.value)
    assert f"{export}:2: message_id: holds whitespace, control characters or invalid Unicode" in str(e.value)


@pytest.mark.parametrize(
    "args",
    [
        ["monitor", "--since", "last tuesday"],
        ["monitor", "--until", "2025-13-45"],
        ["logs", "triage", "--since", "garbage"],
        ["golden", "propose", "--from-logs", "--until", "0001-01-01T00:00:00+05:00"],
    ],
    ids=["monitor-since", "monitor-until", "triage-since", "propose-until"],
)
def test_a_date_on_the_command_line_is_parsed_or_refused_in_one_line(project, args):
    result = CliRunner().invoke(main, ["--root", str(project), *args])
    assert result.exit_code == 2
    option, value = args[-2], args[-1]
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and errors[0].startswith(f"Error: Invalid value for '{option}': "), result.output
    assert f"got {value!r}" in errors[0] and "Traceback" not in result.output
    assert not (project / "mlruns").exists()  # refused before anything was opened


def test_a_pull_refusing_a_key_changes_nothing(project, monkeypatch):
    """The refusal comes before the store is opened: nothing is created for a pull that cannot run."""
    with HostileDify(KEY, [feedback("m-1")], [end_user()], [message("m-1")]) as server:
        monkeypatch.setenv("HOSTILE_KEY", "app-\u00a0key")
        write_spec(project, "hostile-dify", server, "dify")
        with pytest.raises(RagtrackError, match="HOSTILE_KEY holds U\\+00A0 at character 5"):
            pull_logs("dify", version="hostile-dify", root=project)
    assert not (project / "mlruns").exists()
