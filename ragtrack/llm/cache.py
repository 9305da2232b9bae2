"""Content-addressed on-disk cache of completions.

The key covers everything that can change a reply — backend identity, model,
messages and parameters — so an unchanged re-run is served without a single
call, and any change is a miss. Writes are atomic (temp file + rename), so a
crash never leaves a half-written entry.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from ragtrack.files import atomic_write_json
from ragtrack.llm.base import ChatParams, Completion, Message


def cache_key(identity: str, messages: list[Message], params: ChatParams) -> str:
    payload = {"backend": identity, "messages": messages, "params": asdict(params)}
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=list).encode()
    return hashlib.sha256(blob).hexdigest()


class CompletionCache:
    def __init__(self, root: str | Path):
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> Completion | None:
        path = self._path(key)
        try:
            return Completion(**json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):  # missing, or damaged by a crash or an older layout
            return None

    def put(self, key: str, completion: Completion) -> None:
        atomic_write_json(self._path(key), asdict(completion), indent=None)
