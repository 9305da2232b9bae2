"""Content-addressed on-disk cache of completions.

The key covers everything that can change a reply — backend identity, model,
messages and parameters — so an unchanged re-run is served without a single
call, and any change is a miss. Writes are atomic (temp file + rename), so a
crash never leaves a half-written entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict
from pathlib import Path

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
            data = json.loads(path.read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        return Completion(**data)

    def put(self, key: str, completion: Completion) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(asdict(completion), f, ensure_ascii=False)
        os.replace(tmp, path)
