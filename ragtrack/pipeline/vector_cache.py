"""Vectors kept between runs, content-addressed: a text is encoded once per embedding model.

A vector is a pure function of the model and the text, so it is kept under
exactly that key — the model's identity (:func:`model_identity`: a hash of
its name and the bytes of its files) and the SHA-256 of the text — in one
SQLite file per model. Whatever asks for a text's vector finds it there: an
index build (v3's chunks and sentences that v1 already encoded), a question
of the golden set on the next eval, by any version with that embedder. So
building v3–v5 after v1 encodes only the texts v1 did not, and an eval of an
unchanged golden set encodes no question.

Where: ``.ragtrack/cache/vectors`` of the project, or the folder named by the
environment variable ``RAGTRACK_VECTOR_CACHE`` (see :mod:`ragtrack.caches`) — one folder can
serve every project and every run on a machine (a test session, a team's CI
cache), since the keys say exactly what each vector is. Several processes may
read and write one file at once (SQLite, write-ahead log); every write is one
transaction, so a crash loses at most the last batch, never the file.

Safe to delete at any moment, file by file or whole: the next run encodes
again. Bounded: a file past :data:`MAX_BYTES` drops its least recently used
vectors. ``--no-cache`` (which asks LLMs and agents again) leaves it alone,
as it leaves indexes. A cache never fails a run: a file that cannot be
opened, read or written is reported once and the embedder carries on as if
it were absent.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

import numpy as np

from ragtrack.caches import cache_path, mark_used
from ragtrack.files import atomic_write_text
from ragtrack.pipeline.models import ResolvedModel

log = logging.getLogger(__name__)

T = TypeVar("T")
#: A model's file past this size drops its least recently used vectors down to nine tenths of it
#: (about 300,000 vectors of 384 floats: the questions and passages of many corpora).
MAX_BYTES = 512 * 2**20
BATCH = 500  # texts per SELECT: far below SQLite's limit on bound parameters
#: A vector read within this long is not marked used again (a read stays a read, not a write).
MARK_EVERY_S = 3600
_HASH_CHUNK = 2**20


def text_key(text: str) -> bytes:
    """The key of ``text``'s vector under one model: its SHA-256 (32 bytes, whatever its length)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def vector_file(cache_dir: Path, model: ResolvedModel) -> Path:
    """The file of ``model``'s vectors in the vector cache of a project whose cache is ``cache_dir``."""
    folder = cache_path(cache_dir, "vectors")
    return folder / f"{model_identity(model.used, model.path, folder / '.identities')[:24]}.sqlite"


def model_identity(name: str, path: str, memo: Path) -> str:
    """A hash of the model's name and the bytes of every file in its folder ``path``: two models
    that could give different vectors never share one, a model copied elsewhere or reinstalled keeps
    its vectors. Hashing a model's weights takes a moment (0.1 s for MiniLM's 90 MB), so the result is
    remembered in ``memo`` under the files' sizes and modification times, and for the process."""
    files = sorted(p for p in Path(path).rglob("*") if p.is_file()) if path else []
    stats = [(str(p.relative_to(path)), p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    return _identity(name, path, repr(stats), memo)


@functools.lru_cache(maxsize=32)
def _identity(name: str, path: str, stats: str, memo: Path) -> str:
    remembered = memo / hashlib.sha256(f"{name}\0{path}\0{stats}".encode()).hexdigest()[:32]
    try:
        identity = remembered.read_text(encoding="ascii").strip()
        if len(identity) == 64 and all(c in "0123456789abcdef" for c in identity):
            return identity
    except (OSError, UnicodeDecodeError):
        pass
    digest = hashlib.sha256(name.encode("utf-8") + b"\0")
    for file in sorted(p for p in Path(path).rglob("*") if p.is_file()) if path else []:
        digest.update(str(file.relative_to(path)).encode("utf-8", "surrogateescape") + b"\0")
        with open(file, "rb") as f:
            while block := f.read(_HASH_CHUNK):
                digest.update(block)
        digest.update(b"\0")
    identity = digest.hexdigest()
    with contextlib.suppress(OSError):  # a read-only cache: hashed again by the next process, nothing worse
        atomic_write_text(remembered, identity)
    return identity


class VectorCache:
    """Text → unit-length float32 vector of one model, in the SQLite file at ``path``."""

    def __init__(self, path: str | Path, max_bytes: int = MAX_BYTES):
        self.path = Path(path)
        self.max_bytes = max_bytes
        self._db: sqlite3.Connection | None = None
        self._width: int | None = None  # floats per vector, as the file records it
        self._failed = False
        self._lock = threading.Lock()

    def get(self, texts: Iterable[str]) -> dict[str, np.ndarray]:
        """The stored vectors among ``texts`` (a row of another width than the file's is skipped)."""
        by_key = {text_key(t): t for t in texts}
        keys = list(by_key)
        now = int(time.time())

        def read(db: sqlite3.Connection) -> list[tuple[bytes, bytes]]:
            rows = []
            for start in range(0, len(keys), BATCH):
                part = keys[start : start + BATCH]
                marks = ",".join("?" * len(part))
                rows += db.execute(f"SELECT key, vector FROM vectors WHERE key IN ({marks})", part).fetchall()
            with contextlib.suppress(sqlite3.OperationalError):  # a read-only cache is still a cache
                for start in range(0, len(rows), BATCH):  # the least recently used go first once it is full
                    part = [k for k, _ in rows[start : start + BATCH]]
                    db.execute(
                        f"UPDATE vectors SET used = ? WHERE used < ? AND key IN ({','.join('?' * len(part))})",
                        [now, now - MARK_EVERY_S, *part],
                    )
            return rows

        rows = self._with_db(read) or []
        return {
            by_key[k]: np.frombuffer(v, dtype=np.float32)
            for k, v in rows
            if self._width is not None and len(v) == 4 * self._width
        }

    def put(self, texts: list[str], vectors: np.ndarray) -> None:
        """Keep ``vectors`` (one row per text) for later runs; a text already kept stays as it is."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if not texts:
            return
        now = int(time.time())
        rows = [(text_key(t), v.tobytes(), now) for t, v in zip(texts, vectors, strict=True)]

        def write(db: sqlite3.Connection) -> None:
            if self._width is None:
                db.execute("INSERT OR IGNORE INTO meta VALUES ('width', ?)", (str(vectors.shape[1]),))
                self._width = _width(db)
            if self._width != vectors.shape[1]:
                raise sqlite3.DatabaseError(f"it holds vectors of {self._width} floats, not {vectors.shape[1]}")
            db.executemany("INSERT OR IGNORE INTO vectors VALUES (?, ?, ?)", rows)
            self._bound(db)

        self._with_db(write)

    def _bound(self, db: sqlite3.Connection) -> None:
        """Past :attr:`max_bytes`, drop the least recently used vectors down to nine tenths of it."""
        row_bytes = 4 * (self._width or 1) + 48  # the vector, its key and SQLite's own bookkeeping
        (count,) = db.execute("SELECT count(*) FROM vectors").fetchone()
        if count * row_bytes <= self.max_bytes:
            return
        keep = int(self.max_bytes * 0.9) // row_bytes
        db.execute("DELETE FROM vectors WHERE key IN (SELECT key FROM vectors ORDER BY used LIMIT ?)", (count - keep,))
        log.info("vector cache %s: dropped the %d least recently used vectors", self.path, count - keep)

    def _with_db(self, work: Callable[[sqlite3.Connection], T]) -> T | None:
        """``work(connection)`` in one transaction, or None once this cache has failed (reported the
        first time)."""
        with self._lock:
            if self._failed:
                return None
            try:
                if self._db is None:
                    self._db = self._open()
                with self._db:  # one transaction: all of a batch is kept, or none of it
                    return work(self._db)
            except (sqlite3.Error, OSError, ValueError) as e:
                self._failed = True
                log.warning("vector cache %s is unusable (%s); encoding without it", self.path, e)
                return None

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # WAL lets other processes read while one writes; NORMAL sync may lose the last batch on power
        # loss, never the file.
        db = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            with db:
                db.execute("CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
                db.execute(
                    "CREATE TABLE IF NOT EXISTS vectors "
                    "(key BLOB PRIMARY KEY, vector BLOB NOT NULL, used INTEGER NOT NULL) WITHOUT ROWID"
                )
                db.execute("CREATE INDEX IF NOT EXISTS vectors_used ON vectors (used)")
            self._width = _width(db)
        except sqlite3.Error:
            db.close()
            raise
        mark_used(self.path)
        return db


def _width(db: sqlite3.Connection) -> int | None:
    row = db.execute("SELECT value FROM meta WHERE name = 'width'").fetchone()
    return int(row[0]) if row else None
