"""The values a production source reads, checked one field at a time: small pure parsers.

A platform's reply, an export or a saved cursor is untrusted input. Every value a source keeps passes
through one of these parsers, which returns it in the form the store holds or raises
:class:`FieldError` — whose ``reason`` is a short, stable phrase (no value in it), so a source can
count the records it skips by reason, and whose message shows the value (clipped) for the one-line
error of a file or a command-line option.

What is refused, and why:

* a time that is not ISO 8601 or Unix seconds/milliseconds (``"06/12/2024 10:00"`` is day-first or
  month-first depending on who wrote it; ``"yesterday"`` depends on when it is read), not finite, or
  outside :data:`EARLIEST` … now + :data:`SKEW` — a message answered in 1970 (``0``, ``-5``) or in the
  year 9999 is a missing or broken value, never a time to file it under;
* an identifier that is empty, longer than :data:`MAX_ID` characters, holds whitespace, control
  characters or a lone surrogate, or is not a string or an integer (a list or an object would be
  stored as its Python repr); and one put into a URL path is always percent-encoded
  (:func:`path_segment`), so ``../../app/feedbacks?x=`` stays one segment of the route it was meant for;
* a rating other than like / dislike (``5`` is no thumbs up or down);
* an API key that is not printable ASCII (an HTTP header cannot carry it; the key is never shown).

A text (question, answer, comment) is kept, with any lone surrogate — which no UTF-8 store can
write — replaced by U+FFFD; :func:`text` says whether it had to.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeVar
from urllib.parse import quote

from ragtrack.production.messages import epoch_ms, utc_iso

#: Nothing an app answered comes from before this: an earlier time is a missing or broken value.
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
#: How far ahead of this machine's clock a platform's clock may run.
SKEW = timedelta(days=1)
RANGE = f"out of range (before {EARLIEST.year}, or more than a day ahead of this machine's clock)"
#: The longest identifier kept: platforms' IDs are UUIDs (36), 32 hex digits, ``tr-`` + 32.
MAX_ID = 128
#: Unix times above this are milliseconds (1e11 seconds is the year 5138; 1e11 ms is 1973).
MS_ABOVE = 1e11
#: A JSON integer with more digits is kept as its digit string (json refuses > 4300 digits, and no
#: count, time or ID of any platform is that long): the field's parser then says what is wrong.
LONGEST_INT = 40
ISO_EXAMPLE = "2025-03-01T09:30:00Z"
T = TypeVar("T")
#: A code point of a UTF-16 surrogate: in a Python string always a lone one (a JSON ``"\\ud800"``).
_SURROGATE = re.compile("[\ud800-\udfff]")


class FieldError(ValueError):
    """A value a field cannot hold. ``reason``: what is wrong, without the value (to count skips by);
    ``name``: the field, once :func:`field` knows it."""

    def __init__(self, reason: str, value: Any, name: str | None = None):
        self.reason, self.value, self.name = reason, value, name
        super().__init__(f"{name}: {reason}, got {clip(value)}" if name else f"{reason}, got {clip(value)}")

    def skip(self, noun: str) -> str:
        """The reason a source counts a record it skips for this value under (``messages skipped,
        created_at: out of range (…)``): one line per field and problem, whatever the values."""
        return f"{noun} skipped, {self.name}: {self.reason}" if self.name else f"{noun} skipped: {self.reason}"


def field(record: dict, name: str, parse: Callable[[Any], T]) -> T:
    """``record[name]`` (None when absent) through ``parse``; its FieldError names the field."""
    return named(name, record.get(name), parse)


def named(name: str, value: Any, parse: Callable[[Any], T]) -> T:
    """``parse(value)``, its FieldError naming the field ``name``."""
    try:
        return parse(value)
    except FieldError as e:
        raise FieldError(e.reason, e.value, name) from None


def cursor_ms(cursor: dict, key: str, now: datetime | None = None) -> tuple[int, str | None]:
    """The time a saved cursor resumes from, in Unix milliseconds: ``(ms, None)``; ``(0, why)`` when
    the file holds no usable time (``"abc"``, a time ahead of the clock: nothing would ever be newer),
    so the pull reads everything again — it costs requests, the store still recognises what it holds."""
    value = cursor.get(key)
    if value is None:
        return 0, None
    if not isinstance(value, int) or isinstance(value, bool):
        return 0, f"its {key} is not a time, got {clip(value)}"
    try:
        return unix_ms(value, now), None
    except FieldError as e:
        return 0, f"its {key} is {e.reason}, got {clip(value)}"


def unix_ms(value: Any, now: datetime | None = None) -> int:
    """A :func:`timestamp` in Unix milliseconds, keeping the milliseconds a number gives."""
    iso = timestamp(value, now)
    if isinstance(value, int | float):
        return int(value if abs(value) > MS_ABOVE else value * 1000)
    return epoch_ms(iso)


def clip(value: Any, width: int = 60) -> str:
    """``repr(value)`` short enough for one line of an error (a 5,000-digit ID is shown by its length)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**width:
        return f"an integer of some {int(value.bit_length() * math.log10(2)) + 1} digits"
    text = repr(value)
    return text if len(text) <= width else f"{text[: width - 1]}… ({len(str(value))} characters)"


def json_int(digits: str) -> int | str:
    """``json.loads(..., parse_int=json_int)``: an integer, or its digits when it is too long to be one."""
    return int(digits) if len(digits.lstrip("-")) <= LONGEST_INT else digits


def timestamp(value: Any, now: datetime | None = None) -> str:
    """A time as ISO 8601 in UTC to the second (``2025-03-01T09:30:00Z``), from an ISO 8601 string (one
    without a zone is UTC, as Dify writes them) or a JSON number of Unix seconds or milliseconds;
    FieldError when it is neither, or out of range (see the module)."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise FieldError("not a time (a number that is not finite)", value)
        seconds = value / 1000 if abs(value) > MS_ABOVE else value
        try:
            moment = datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, OSError, ValueError):
            raise FieldError(RANGE, value) from None
    elif isinstance(value, str) and value.strip():
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            raise FieldError(f"not an ISO 8601 time such as {ISO_EXAMPLE}", value) from None
    else:
        raise FieldError(f"not a time (ISO 8601 such as {ISO_EXAMPLE}, or Unix seconds)", value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        moment = moment.astimezone(UTC)
    except OverflowError:  # year 1 or 9999 with an offset: outside what a datetime holds once in UTC
        raise FieldError(RANGE, value) from None
    if not EARLIEST <= moment <= (now or datetime.now(UTC)) + SKEW:
        raise FieldError(RANGE, value)
    return utc_iso(moment)


def when(text: str) -> str:
    """A date or time given on the command line (``--since``, ``--until``): ISO 8601 only, any year from
    :data:`EARLIEST` on (an ``--until`` may lie ahead); as :func:`timestamp` returns it."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise FieldError(f"not a date: give ISO 8601, e.g. 2025-06-05 or {ISO_EXAMPLE}", text) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        moment = moment.astimezone(UTC)
    except OverflowError:
        moment = EARLIEST - SKEW  # refused just below
    if moment < EARLIEST or moment.year >= 9999:
        raise FieldError(f"out of range (a date from {EARLIEST.date()} on)", text)
    return utc_iso(moment)


def identifier(value: Any) -> str:
    """A platform's ID as text: a string or an integer, 1 to :data:`MAX_ID` characters, printable,
    without whitespace; FieldError otherwise (a list or an object is no ID: its repr would be kept)."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise FieldError("not an identifier (a string or an integer)", value)
    if not value:
        raise FieldError("empty", value)
    if len(value) > MAX_ID:
        raise FieldError(f"longer than {MAX_ID} characters", value)
    if not value.isprintable() or any(c.isspace() for c in value):
        raise FieldError("holds whitespace, control characters or invalid Unicode", value)
    if value in (".", ".."):
        raise FieldError("not an identifier (a path step)", value)
    return value


def path_segment(value: Any) -> str:
    """An :func:`identifier` made one URL path segment: every reserved character percent-encoded
    (``/``, ``?``, ``#``, ``%``…), so no value can leave the route it is put in."""
    return quote(identifier(value), safe="")


def text(value: Any) -> tuple[str, bool]:
    """A text field as stored: None is ``""``; a string with any lone surrogate replaced by U+FFFD,
    and whether one was; FieldError for anything else (a number, a list: not a question or answer)."""
    if value is None:
        return "", False
    if not isinstance(value, str):
        raise FieldError("not a text", value)
    cleaned = _SURROGATE.sub("\ufffd", value)
    return cleaned, cleaned != value


def rating(value: Any) -> Literal["like", "dislike"] | None:
    """Dify's ``rating`` (or a JSONL one): ``like``, ``dislike`` or null; FieldError for anything else."""
    if value is None or value in ("like", "dislike"):
        return value
    raise FieldError("not a rating (like, dislike or null)", value)


def thumb(value: Any) -> Literal["like", "dislike"] | None:
    """RAGFlow's ``thumbup``: true is a like, false a dislike, absent or null none; FieldError otherwise."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "like" if value else "dislike"
    raise FieldError("not a thumbs up or down (true, false or null)", value)


def api_key(value: str, env: str) -> str:
    """The key held by ``env``, if an HTTP header can carry it (printable ASCII); the error names the
    variable and the position of the first bad character, never the key."""
    for n, c in enumerate(value, start=1):
        if not (c.isascii() and c.isprintable()) or c == " ":
            what = f"U+{ord(c):04X}" if not c.isascii() else "a space or control character"
            raise ValueError(
                f"{env} holds {what} at character {n}: an API key is printable ASCII "
                "(pasted with a quote, a non-breaking space or a line break?)"
            )
    return value
