"""Query-time vectors kept between runs: a text is encoded once per project and embedder.

Index-time texts (sentences, topics) are stored beside their index. What an
answer encodes — the question, its rewrites, "question + outline point" — is
the same on every eval of a golden set, and across versions that retrieve
alike, so it is kept too: in one SQLite file per embedder under the project's
cache (``.ragtrack/cache/vectors``), which several processes (parallel evals,
a team's CI jobs restoring one cache) may read and write at once. A vector is
a pure function of model and text, like an index, so ``--no-cache`` (which asks
LLMs and agents again) leaves it alone.

A cache never fails a run: a file that cannot be opened, read or written is
reported once and the embedder carries on as if it were absent.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

import numpy as np

from ragtrack.caches import mark_used

log = logging.getLogger(__name__)

T = TypeVar("T")
BATCH = 500  # texts per SELECT: far below SQLite's limit on bound parameters


class QueryVectorCache:
    """Text → unit-length float32 vector of one embedder, in a SQLite file at ``path``."""

    def __init__(self, path: str | Path, dimension: int):
        self.path = Path(path)
        self.dimension = dimension
        self._db: sqlite3.Connection | None = None
        self._failed = False
        self._lock = threading.Lock()

    def get(self, texts: Iterable[str]) -> dict[str, np.ndarray]:
        """The stored vectors among ``texts`` (a row of another width, from another model, is skipped)."""
        texts = list(texts)

        def read(db: sqlite3.Connection) -> list[tuple[str, bytes]]:
            rows = []
            for start in range(0, len(texts), BATCH):
                part = texts[start : start + BATCH]
                marks = ",".join("?" * len(part))
                rows += db.execute(f"SELECT text, vector FROM vectors WHERE text IN ({marks})", part).fetchall()
            return rows

        rows = self._with_db(read) or []
        return {t: np.frombuffer(b, dtype=np.float32) for t, b in rows if len(b) == 4 * self.dimension}

    def put(self, texts: list[str], vectors: np.ndarray) -> None:
        """Keep ``vectors`` (one row per text) for later runs; a text already kept stays as it is."""
        rows = [(t, np.ascontiguousarray(v, dtype=np.float32).tobytes()) for t, v in zip(texts, vectors, strict=True)]
        self._with_db(lambda db: db.executemany("INSERT OR IGNORE INTO vectors VALUES (?, ?)", rows))

    def _with_db(self, work: Callable[[sqlite3.Connection], T]) -> T | None:
        """``work(connection)``, or None once this cache has failed (reported the first time)."""
        with self._lock:
            if self._failed:
                return None
            try:
                if self._db is None:
                    self._db = self._open()
                return work(self._db)
            except (sqlite3.Error, OSError) as e:
                self._failed = True
                log.warning("query vector cache %s is unusable (%s); encoding without it", self.path, e)
                return None

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Autocommit (each statement its own transaction); WAL lets other processes read while one writes;
        # NORMAL sync may lose the last rows on power loss, never the file.
        db = sqlite3.connect(self.path, timeout=30, check_same_thread=False, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("CREATE TABLE IF NOT EXISTS vectors (text TEXT PRIMARY KEY, vector BLOB NOT NULL)")
        except sqlite3.Error:
            db.close()
            raise
        mark_used(self.path)
        return db
