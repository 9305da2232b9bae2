"""The parsers of :mod:`ragtrack.production.fields`, each against hand-written values and results."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime

import pytest

from ragtrack.production import fields
from ragtrack.production.fields import FieldError

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
RANGE = "out of range (before 2000, or more than a day ahead of this machine's clock)"


@pytest.mark.parametrize(
    ("value", "iso"),
    [
        ("2024-06-12T10:00:00Z", "2024-06-12T10:00:00Z"),
        ("2024-06-12T18:00:00+08:00", "2024-06-12T10:00:00Z"),
        ("2024-06-12 10:00", "2024-06-12T10:00:00Z"),  # no zone: UTC, as Dify writes them
        ("2024-06-12T10:00:00.999Z", "2024-06-12T10:00:00Z"),  # to the second
        (1718186400, "2024-06-12T10:00:00Z"),  # Unix seconds
        (1718186400.7, "2024-06-12T10:00:00Z"),
        (1718186400123, "2024-06-12T10:00:00Z"),  # Unix milliseconds (RAGFlow)
        (946684800, "2000-01-01T00:00:00Z"),  # the earliest kept
        ("2026-12-08T11:59:59Z", "2026-12-08T11:59:59Z"),  # a day ahead: a clock that runs fast
    ],
)
def test_a_time_in_iso_8601_or_unix_seconds_or_ms_is_utc_to_the_second(value, iso):
    assert fields.timestamp(value, NOW) == iso


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("06/12/2024 10:00", "not an ISO 8601 time such as 2025-03-01T09:30:00Z"),
        ("yesterday", "not an ISO 8601 time such as 2025-03-01T09:30:00Z"),
        (math.nan, "not a time (a number that is not finite)"),
        (math.inf, "not a time (a number that is not finite)"),
        (1e20, RANGE),
        (0, RANGE),  # 1970: a missing value, never a time
        (-5, RANGE),
        (946684799, RANGE),  # a second before 2000
        ("0001-01-01T00:00:00+05:00", RANGE),  # before year 1 once in UTC
        ("9999-12-31T23:59:59-05:00", RANGE),  # after year 9999 once in UTC
        ("2026-12-08T12:00:01Z", RANGE),  # more than a day ahead
        (True, "not a time (ISO 8601 such as 2025-03-01T09:30:00Z, or Unix seconds)"),
        (None, "not a time (ISO 8601 such as 2025-03-01T09:30:00Z, or Unix seconds)"),
        ("", "not a time (ISO 8601 such as 2025-03-01T09:30:00Z, or Unix seconds)"),
        ([2024, 6, 12], "not a time (ISO 8601 such as 2025-03-01T09:30:00Z, or Unix seconds)"),
    ],
)
def test_a_value_that_is_no_time_is_refused_with_a_reason_that_does_not_show_it(value, reason):
    with pytest.raises(FieldError) as e:
        fields.timestamp(value, NOW)
    assert e.value.reason == reason and str(e.value) == f"{reason}, got {value!r}"


def test_a_refusal_names_its_field_and_makes_a_skip_reason():
    with pytest.raises(FieldError) as e:
        fields.field({"created_at": "yesterday"}, "created_at", fields.timestamp)
    assert str(e.value) == "created_at: not an ISO 8601 time such as 2025-03-01T09:30:00Z, got 'yesterday'"
    assert e.value.skip("messages") == "messages skipped, created_at: not an ISO 8601 time such as 2025-03-01T09:30:00Z"


@pytest.mark.parametrize(
    ("text", "iso"),
    [
        ("2025-06-05", "2025-06-05T00:00:00Z"),
        ("2025-06-05T09:30:00+08:00", "2025-06-05T01:30:00Z"),
        ("2999-01-01", "2999-01-01T00:00:00Z"),
    ],  # an --until may lie ahead
)
def test_a_command_line_date_is_iso_8601(text, iso):
    assert fields.when(text) == iso


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("last tuesday", "not a date: give ISO 8601, e.g. 2025-06-05 or 2025-03-01T09:30:00Z"),
        ("2025-13-45", "not a date: give ISO 8601, e.g. 2025-06-05 or 2025-03-01T09:30:00Z"),
        ("garbage", "not a date: give ISO 8601, e.g. 2025-06-05 or 2025-03-01T09:30:00Z"),
        ("1999-12-31", "out of range (a date from 2000-01-01 on)"),
        ("0001-01-01T00:00:00+05:00", "out of range (a date from 2000-01-01 on)"),
        ("9999-12-31T23:59:59-05:00", "out of range (a date from 2000-01-01 on)"),
    ],
)
def test_a_command_line_date_that_is_none_is_refused(text, reason):
    with pytest.raises(FieldError) as e:
        fields.when(text)
    assert e.value.reason == reason


@pytest.mark.parametrize(
    ("value", "kept"),
    [("c-1", "c-1"), (42, "42"), ("a" * 128, "a" * 128), ("会话-7", "会话-7"), ("../x?y=1", "../x?y=1")],
)
def test_an_identifier_is_kept_as_text(value, kept):
    assert fields.identifier(value) == kept


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({"id": "c-1"}, "not an identifier (a string or an integer)"),  # would be stored as its repr
        (["c-1"], "not an identifier (a string or an integer)"),
        (None, "not an identifier (a string or an integer)"),
        (True, "not an identifier (a string or an integer)"),
        (1.5, "not an identifier (a string or an integer)"),
        ("", "empty"),
        ("9" * 129, "longer than 128 characters"),
        ("9" * 5000, "longer than 128 characters"),
        ("c 1", "holds whitespace, control characters or invalid Unicode"),
        ("c\n1", "holds whitespace, control characters or invalid Unicode"),
        ("c\ud8001", "holds whitespace, control characters or invalid Unicode"),
        ("..", "not an identifier (a path step)"),
        (".", "not an identifier (a path step)"),
    ],
)
def test_an_identifier_that_is_none_is_refused(value, reason):
    with pytest.raises(FieldError) as e:
        fields.identifier(value)
    assert e.value.reason == reason


def test_a_refused_long_value_is_shown_clipped():
    with pytest.raises(FieldError) as e:
        fields.identifier("9" * 5000)
    assert str(e.value) == f"longer than 128 characters, got '{'9' * 58}… (5000 characters)"
    assert fields.clip(10**5000) == "an integer of some 5001 digits"


@pytest.mark.parametrize(
    ("value", "segment"),
    [
        ("../../app/feedbacks?x=", "..%2F..%2Fapp%2Ffeedbacks%3Fx%3D"),
        ("a#b%c", "a%23b%25c"),
        ("eu-1", "eu-1"),
        ("用户", "%E7%94%A8%E6%88%B7"),
    ],
)
def test_a_path_segment_is_percent_encoded_whole(value, segment):
    assert fields.path_segment(value) == segment


def test_a_too_long_json_integer_is_kept_as_its_digits():
    assert json.loads('{"a": 12, "b": %s}' % ("9" * 5000), parse_int=fields.json_int) == {"a": 12, "b": "9" * 5000}
    assert json.loads("-" + "1" * 41, parse_int=fields.json_int) == "-" + "1" * 41
    assert json.loads("1" * 40, parse_int=fields.json_int) == int("1" * 40)


@pytest.mark.parametrize(
    ("value", "result"),
    [
        (None, ("", False)),
        ("ok", ("ok", False)),
        ("a\ud800b", ("a\ufffdb", True)),
        ("\udfff\ud83d", ("\ufffd\ufffd", True)),
        ("😀", ("😀", False)),
    ],
)
def test_a_text_keeps_everything_but_a_lone_surrogate(value, result):
    assert fields.text(value) == result


@pytest.mark.parametrize("value", [5, ["a"], {"text": "a"}])
def test_a_text_that_is_no_string_is_refused(value):
    with pytest.raises(FieldError, match="not a text"):
        fields.text(value)


@pytest.mark.parametrize(("value", "rating"), [("like", "like"), ("dislike", "dislike"), (None, None)])
def test_a_rating_is_like_dislike_or_none(value, rating):
    assert fields.rating(value) == rating


@pytest.mark.parametrize("value", [5, "LIKE", True, "thumbs_up", 0])
def test_a_rating_that_is_none_of_them_is_refused(value):
    with pytest.raises(FieldError, match=r"not a rating \(like, dislike or null\)"):
        fields.rating(value)


@pytest.mark.parametrize(("value", "rating"), [(True, "like"), (False, "dislike"), (None, None)])
def test_a_thumb_is_a_boolean_or_none(value, rating):
    assert fields.thumb(value) == rating


@pytest.mark.parametrize("value", [5, 1, "yes", "true"])
def test_a_thumb_that_is_no_boolean_is_refused(value):
    with pytest.raises(FieldError, match="not a thumbs up or down"):
        fields.thumb(value)


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("app-kéy", "KEY holds U+00E9 at character 6: an API key is printable ASCII"),
        ("app-\u00a0key", "KEY holds U+00A0 at character 5"),
        ("“app-key”", "KEY holds U+201C at character 1"),
        ("app key", "KEY holds a space or control character at character 4"),
        ("app-key\n", "KEY holds a space or control character at character 8"),
    ],
)
def test_a_key_an_http_header_cannot_carry_is_refused_without_showing_it(key, message):
    with pytest.raises(ValueError) as e:
        fields.api_key(key, "KEY")
    assert message in str(e.value) and "app" not in str(e.value).split(": an API key")[0]
    assert fields.api_key("app-9f3B_x.y", "KEY") == "app-9f3B_x.y"


@pytest.mark.parametrize(
    ("cursor", "result"),
    [
        ({}, (0, None)),
        ({"update_time": 1718186400123}, (1718186400123, None)),
        ({"update_time": 1718186400}, (1718186400000, None)),  # seconds
        ({"update_time": "abc"}, (0, "its update_time is not a time, got 'abc'")),
        ({"update_time": 1.5e12}, (0, "its update_time is not a time, got 1500000000000.0")),
        ({"update_time": 1965000000000}, (0, f"its update_time is {RANGE}, got 1965000000000")),  # 2032: ahead
        ({"update_time": 0}, (0, f"its update_time is {RANGE}, got 0")),
    ],
)
def test_a_saved_cursor_time_is_used_or_ignored_with_the_reason(cursor, result):
    assert fields.cursor_ms(cursor, "update_time", NOW) == result
