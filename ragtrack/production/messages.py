"""One answered question from production, as plain data: the contract between pulling and its readers.

Every source (``dify``, ``ragflow``, ``mlflow``, ``jsonl``) produces these;
triage, ``golden propose --from-logs`` and ``monitor`` read them back from the
``production`` experiment. End users appear only as a salted hash
(:func:`hash_user`): the platform's identifier never leaves the pull.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from typing import Literal

from ragtrack.records import ContextRecord, StageRecord

Rating = Literal["like", "dislike"]
#: The sources ``ragtrack logs pull --from`` knows (checked by the sources registry).
SOURCES = ("dify", "ragflow", "mlflow", "jsonl")
#: What part of an app's traffic a pull could see. ``all``: every answered question (traces, a RAGFlow
#: assistant's sessions, an export). ``rated_conversations``: only the conversations of end users who
#: left feedback (Dify's service API), so a rate over them is not the app's rate.
Coverage = Literal["all", "rated_conversations"]


def hash_user(user: str | None, salt: str) -> str | None:
    """A stable, non-reversible stand-in for an end-user identifier (the project's salt keeps hashes from
    one project from being matched against another's)."""
    if not user:
        return None
    return hashlib.sha256(f"{salt}\0{user}".encode()).hexdigest()[:16]


def utc_iso(value: str | int | float | datetime) -> str:
    """A timestamp as ISO 8601 in UTC to the second (``2025-03-01T09:30:00Z``): from an ISO string (one
    without a zone is taken as UTC, as Dify writes them), epoch seconds, or epoch milliseconds (RAGFlow's
    ``create_time``). ValueError when it is none of these."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        moment = datetime.fromtimestamp(value / 1000 if value > 1e11 else value, UTC)
    elif isinstance(value, str) and value.strip():
        moment = datetime.fromisoformat(value.strip())
    else:
        raise ValueError(f"not a timestamp: {value!r}")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def epoch_ms(iso: str) -> int:
    """Milliseconds since the epoch of a :func:`utc_iso` timestamp (what MLflow's trace times are)."""
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


@dataclass
class ProductionMessage:
    """One question an app answered in production, with what it retrieved and what the user said of it.

    ``message_id`` is the platform's own ID (for a JSONL export without one, a hash of the record), and
    ``(source, app, message_id)`` identifies a message across pulls: pulling again updates it (a rating
    changed since), never duplicates it. ``contexts`` are the app's retrieved segments, mapped to canonical
    passage IDs as an external agent's are (:mod:`ragtrack.agents.mapping`); an empty list means the app
    reported no retrieval for it. ``stages``: a workflow app's nodes as an eval records them (role,
    status, outputs, each retrieval node's own contexts), so node metrics read production as they read
    an eval (:mod:`ragtrack.evaluation.nodes`); empty for an app whose traces show no nodes.
    """

    message_id: str
    source: str
    app: str  # the app / version that served it (a version spec's name, or the export's app_version)
    question: str
    answer: str
    created_at: str  # ISO 8601, UTC (utc_iso)
    contexts: list[ContextRecord] = field(default_factory=list)
    conversation_id: str | None = None
    user: str | None = None  # hashed (hash_user), never the platform's identifier
    rating: Rating | None = None
    comment: str | None = None
    rated_at: str | None = None  # when the rating was given or last changed, ISO 8601
    coverage: Coverage = "all"  # what part of the app's traffic the pull that found it could see
    trace_id: str | None = None  # the MLflow trace holding it, once stored (set by the read side)
    stages: list[StageRecord] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, str]:
        """What identifies the message across pulls."""
        return self.source, self.app, self.message_id

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> ProductionMessage:
        names = {f.name for f in fields(cls)}
        data = {k: v for k, v in data.items() if k in names}
        data["contexts"] = [ContextRecord(**c) for c in data.get("contexts", [])]
        data["stages"] = [StageRecord.from_json(s) for s in data.get("stages", [])]
        return cls(**data)
