"""``--from jsonl FILE``: an export with one answered question per line.

    {"question": "…", "answer": "…", "contexts": [{"text": "…", "id": "seg-17"}],
     "rating": "dislike", "comment": "wrong port", "user": "u-42",
     "created_at": "2025-03-01T09:30:00+08:00", "app_version": "bot-v3", "message_id": "m-981",
     "conversation_id": "c-77"}

``rating`` is ``like``, ``dislike`` or null; ``comment`` and ``user`` may be null; ``created_at`` is
ISO 8601 (without a zone: UTC) or a number of Unix seconds or milliseconds, from 2000 to now;
``contexts`` lists what the app retrieved, in rank order (``[]``: nothing), a
context's ``id`` its own segment ID if it has one. A line without ``message_id`` is identified by
a hash of its question, answer, user, time and app version, so exporting it again with another
rating updates it. The whole file is checked before anything is stored: a bad line is one error
naming the file, line and field.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ragtrack.agents.mapping import PlatformContext
from ragtrack.errors import InputError, Problem, RagtrackError, problems_from_validation
from ragtrack.files import read_jsonl
from ragtrack.production import fields
from ragtrack.production.sources import Batch, PulledMessage, SourceRequest, UserFeedback

BATCH = 200  # messages stored per step


class _Context(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str
    id: str | None = None


class Record(BaseModel):
    """One line of the export."""

    model_config = ConfigDict(extra="forbid")
    question: str = Field(min_length=1)
    answer: str
    contexts: list[_Context]
    rating: Literal["like", "dislike"] | None = None
    comment: str | None = None
    user: str | None = None
    created_at: str
    app_version: str = Field(min_length=1)
    message_id: str | None = Field(default=None, min_length=1)
    # The conversation it belongs to: its turns are ordered by created_at, and a later turn keeps the
    # earlier ones as its history when it becomes a golden candidate.
    conversation_id: str | None = Field(default=None, min_length=1)

    @field_validator("created_at", mode="before")
    @classmethod
    def _timestamp(cls, value: object) -> str:
        return fields.timestamp(value)  # its FieldError, a ValueError, is the line's problem

    @field_validator("message_id")
    @classmethod
    def _identifier(cls, value: str | None) -> str | None:
        return None if value is None else fields.identifier(value)

    @field_validator("question", "answer", "comment", "user")
    @classmethod
    def _text(cls, value: str | None) -> str | None:
        return None if value is None else fields.text(value)[0]

    def identity(self) -> str:
        """``message_id``, or a hash of what does not change when the user re-rates the answer."""
        if self.message_id:
            return self.message_id
        parts = [self.question, self.answer, self.user or "", self.created_at, self.app_version]
        return "jsonl-" + hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode()).hexdigest()[:16]


class JsonlSource:
    name = "jsonl"
    coverage = "all"

    def __init__(self, path: Path, app: str | None):
        self.path = path
        self.app = app or path.stem  # a record's app_version names its own app
        self.records = read_records(path)

    def batches(self, cursor: dict, known: Callable[[str], bool], progress: Callable[[str], None]) -> Iterator[Batch]:
        messages = [_pulled(r) for r in self.records]
        for i in range(0, len(messages), BATCH):
            chunk = messages[i : i + BATCH]
            progress(f"{self.path.name}: {i + len(chunk)}/{len(messages)} records")
            yield Batch(messages=chunk, pulled=len(chunk))


def read_records(path: Path) -> list[Record]:
    """Every record of the file, checked; all its problems at once (file:line: field: message)."""
    if not path.is_file():
        raise RagtrackError(f"{path}: no such file (--from jsonl takes the export's path)")
    rows, problems = read_jsonl(path)
    records: list[Record] = []
    first_line: dict[str, int] = {}
    for line, row in rows:
        try:
            record = Record.model_validate(row)
        except ValidationError as e:
            problems += problems_from_validation(str(path), e, line, noun="field", data=row, model=Record)
            continue
        identity = record.identity()
        if identity in first_line:
            earlier = f"line {first_line[identity]}"
            problems.append(
                Problem(str(path), f"{identity!r} is also the message_id of {earlier}", line, "message_id")
                if record.message_id
                else Problem(str(path), f"the same record as {earlier} (give each a message_id)", line)
            )
            continue
        first_line[identity] = line
        records.append(record)
    if problems:
        raise InputError(problems)
    if not records:
        raise InputError([Problem(str(path), "holds no records")])
    return records


def _pulled(r: Record) -> PulledMessage:
    return PulledMessage(
        message_id=r.identity(),
        question=r.question,
        answer=r.answer,
        created_at=r.created_at,
        contexts=[PlatformContext(c.id or f"context@{n}", c.text) for n, c in enumerate(r.contexts, start=1)],
        user=r.user,
        feedback=UserFeedback(r.rating, r.comment) if r.rating else None,
        app=r.app_version,
        conversation_id=r.conversation_id,
    )


def open_source(request: SourceRequest) -> JsonlSource:
    if not request.path:
        raise RagtrackError("--from jsonl needs the export: ragtrack logs pull --from jsonl FILE")
    return JsonlSource(Path(request.path), request.app)
