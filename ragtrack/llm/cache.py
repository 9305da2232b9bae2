"""Content-addressed on-disk caches: LLM completions, and agent replies (``ragtrack.agents``).

The key covers everything that can change a reply — backend identity, model,
messages and parameters — so an unchanged re-run is served without a single
call, and any change is a miss. Writes are atomic (temp file + rename), so a
crash never leaves a half-written entry.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict
from pathlib import Path

from ragtrack.caches import mark_used
from ragtrack.files import atomic_write_json
from ragtrack.llm.base import ChatParams, Completion, Message

log = logging.getLogger(__name__)


def cache_key(identity: str, messages: list[Message], params: ChatParams) -> str:
    """The key of one request. A seed is part of it only when one is sent (a repeated judge sample's), so
    the keys of every other request are what they were before seeds existed."""
    fields = {k: v for k, v in asdict(params).items() if not (k == "seed" and v is None)}
    payload = {"backend": identity, "messages": messages, "params": fields}
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=list).encode()
    return hashlib.sha256(blob).hexdigest()


class JsonCache:
    """Key (a hex digest) → one JSON object, in ``root/<2 hex>/<key>.json``."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self._unwritable = False

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get_json(self, key: str) -> dict | None:
        path = self._path(key)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # missing, or damaged by a crash
            return None
        if not isinstance(data, dict):
            return None
        mark_used(path)
        return data

    def put_json(self, key: str, payload: dict) -> None:
        """Keep ``payload``; a cache that cannot be written is reported once and costs only the
        next run's calls, never this run."""
        try:
            atomic_write_json(self._path(key), payload, indent=None)
        except OSError as e:
            if not self._unwritable:
                self._unwritable = True
                log.warning("cannot write the reply cache %s (%s); replies are not kept", self.root, e.strerror or e)


class CompletionCache(JsonCache):
    def get(self, key: str) -> Completion | None:
        data = self.get_json(key)
        try:
            return Completion(**data) if data is not None else None
        except TypeError:  # written by an older layout
            return None

    def put(self, key: str, completion: Completion) -> None:
        self.put_json(key, asdict(completion))
