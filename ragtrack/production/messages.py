"""One answered question from production, as plain data: the contract between pulling and its readers.

Every source (``dify``, ``ragflow``, ``mlflow``, ``jsonl``) produces these;
triage, ``golden propose --from-logs`` and ``monitor`` read them back from the
``production`` experiment. End users appear only as a salted hash
(:func:`hash_user`): the platform's identifier never leaves the pull.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Literal

from ragtrack.records import ContextRecord

Rating = Literal["like", "dislike"]
#: The sources ``ragtrack logs pull --from`` knows (checked by the sources registry).
SOURCES = ("dify", "ragflow", "mlflow", "jsonl")


def hash_user(user: str | None, salt: str) -> str | None:
    """A stable, non-reversible stand-in for an end-user identifier (the project's salt keeps hashes from
    one project from being matched against another's)."""
    if not user:
        return None
    return hashlib.sha256(f"{salt}\0{user}".encode()).hexdigest()[:16]


@dataclass
class ProductionMessage:
    """One question an app answered in production, with what it retrieved and what the user said of it.

    ``message_id`` is the platform's own ID (for a JSONL export without one, a hash of the record), and
    ``(source, app, message_id)`` identifies a message across pulls: pulling again updates it (a rating
    changed since), never duplicates it. ``contexts`` are the app's retrieved segments, mapped to canonical
    passage IDs as an external agent's are (:mod:`ragtrack.agents.mapping`).
    """

    message_id: str
    source: str
    app: str  # the app / version that served it (a version spec's name, or the export's app_version)
    question: str
    answer: str
    created_at: str  # ISO 8601, UTC
    contexts: list[ContextRecord] = field(default_factory=list)
    conversation_id: str | None = None
    user: str | None = None  # hashed (hash_user), never the platform's identifier
    rating: Rating | None = None
    comment: str | None = None
    rated_at: str | None = None  # when the rating was given or last changed, ISO 8601

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> ProductionMessage:
        data = dict(data)
        data["contexts"] = [ContextRecord(**c) for c in data.get("contexts", [])]
        return cls(**data)
