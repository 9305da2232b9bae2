"""Documents → canonical passages with stable IDs.

Every agent version chunks the corpus its own way, yet all of them are scored
against one golden set. That only works if the golden set names *canonical*
passages whose IDs do not depend on any version's chunking. This module
defines them:

* a JSONL file: one passage per line, ``{"id", "text", "title"?, "doc_id"?}``;
  passages sharing a ``doc_id`` form one document (joined by a blank line);
* a folder of Markdown / text files: one passage per heading section, with
  ID ``<relative/path.md>#<slug>/<slug>/...`` (the heading path), identical on
  every machine.

Each passage knows its character span inside its document, so a version's
chunk (itself a span) can be mapped back to the passages it covers.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ragtrack.errors import InputError, Problem
from ragtrack.files import read_jsonl, read_text
from ragtrack.text import language_of

TEXT_SUFFIXES = (".md", ".markdown", ".txt")
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^\s*(```|~~~)")


@dataclass(frozen=True)
class Passage:
    """A canonical unit of the corpus: what golden GT context IDs name."""

    id: str
    text: str
    doc_id: str
    start: int
    end: int
    title: str = ""
    heading_path: tuple[str, ...] = ()


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    passages: tuple[Passage, ...]

    @property
    def title(self) -> str:
        return self.passages[0].heading_path[0] if self.passages[0].heading_path else self.id


@dataclass
class Corpus:
    """Documents and their passages, indexed by ID."""

    source: str
    documents: dict[str, Document]
    passages: dict[str, Passage] = field(init=False)

    def __post_init__(self) -> None:
        self.passages = {p.id: p for d in self.documents.values() for p in d.passages}

    def __len__(self) -> int:
        return len(self.passages)

    @property
    def digest(self) -> str:
        """Content hash over passage IDs and texts (order-independent, path-independent)."""
        h = hashlib.sha256()
        for pid in sorted(self.passages):
            h.update(pid.encode())
            h.update(b"\0")
            h.update(self.passages[pid].text.encode())
            h.update(b"\0")
        return h.hexdigest()[:16]

    @property
    def language(self) -> str:
        """``zh`` or ``en``, judged on the first 400 passages."""
        return language_of("".join(p.text for _, p in zip(range(400), self.passages.values(), strict=False)))

    def passages_covering(self, doc_id: str, spans: Iterable[tuple[int, int]], min_overlap: float) -> list[str]:
        """Canonical passage IDs that the given spans of ``doc_id`` cover.

        A passage counts when its overlap with a span is at least ``min_overlap``
        of the shorter of the two, so a chunk that merely touches a passage's
        edge does not count as retrieving it. Returned in document order.
        """
        doc = self.documents[doc_id]
        hits: list[str] = []
        for start, end in spans:
            for p in doc.passages:
                overlap = min(end, p.end) - max(start, p.start)
                shorter = min(end - start, p.end - p.start)
                if overlap > 0 and overlap >= min_overlap * shorter and p.id not in hits:
                    hits.append(p.id)
        return sorted(hits, key=lambda pid: self.passages[pid].start)


def slugify(text: str) -> str:
    """Lower-case, keep Unicode word characters, collapse the rest into ``-``."""
    text = unicodedata.normalize("NFKC", text).lower()
    return re.sub(r"[^\w]+", "-", text).strip("-_") or "section"


def load_corpus(path: str | Path) -> Corpus:
    """Load a JSONL passage file or a folder of Markdown/text files."""
    path = Path(path)
    if path.is_dir():
        return _load_folder(path)
    if path.is_file() and path.suffix in (".jsonl", ".ndjson"):
        return _load_jsonl(path)
    if path.is_file():
        raise InputError([Problem(str(path), "a corpus is a .jsonl file or a folder of .md/.txt")])
    raise InputError([Problem(str(path), "corpus not found")])


def _load_folder(root: Path) -> Corpus:
    files = sorted(
        (p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES),
        key=lambda p: p.relative_to(root).as_posix(),
    )
    if not files:
        raise InputError([Problem(str(root), "no .md or .txt files in the corpus folder")])
    documents = {}
    for f in files:
        rel = f.relative_to(root).as_posix()
        doc = split_markdown(rel, read_text(f, normalize=True))
        if doc.passages:
            documents[rel] = doc
    return Corpus(source=str(root), documents=documents)


def split_markdown(doc_id: str, text: str) -> Document:
    """Split one Markdown/text document into passages, one per heading section.

    A section runs from its heading line to the next heading of any level, so
    an ``##`` section's own passage holds its intro text and each ``###`` below
    it is a passage of its own. Sections with no body text are skipped (their
    heading still names their children). Headings inside fenced code are text.
    """
    lines = text.split("\n")
    offsets, pos = [], 0
    for line in lines:
        offsets.append(pos)
        pos += len(line) + 1

    heads: list[tuple[int, int, str]] = []  # (line number, level, heading text)
    in_fence = False
    for i, line in enumerate(lines):
        if _FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence and (m := _HEADING.match(line)):
            heads.append((i, len(m.group(1)), m.group(2).strip()))

    sections: list[tuple[int, int, tuple[str, ...], str]] = []  # start, end, path, heading line
    if not heads or heads[0][0] > 0:
        first = heads[0][0] if heads else len(lines)
        sections.append((0, offsets[first] if heads else len(text), (), ""))
    stack: list[tuple[int, str]] = []
    for n, (line_no, level, title) in enumerate(heads):
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, title))
        end = offsets[heads[n + 1][0]] if n + 1 < len(heads) else len(text)
        sections.append((offsets[line_no], end, tuple(t for _, t in stack), lines[line_no]))

    passages: list[Passage] = []
    seen: dict[str, int] = {}
    for start, end, path, heading_line in sections:
        pid = doc_id + ("#" + "/".join(slugify(h) for h in path) if path else "")
        # Count every section, bodiless ones too, so adding a body never renames a sibling.
        seen[pid] = seen.get(pid, 0) + 1
        if seen[pid] > 1:
            pid = f"{pid}~{seen[pid]}"
        body = text[start:end]
        if not body[len(heading_line) :].strip():
            continue
        # Trim trailing blank lines so spans hold text only.
        end = start + len(body.rstrip())
        passages.append(
            Passage(
                id=pid,
                text=text[start:end],
                doc_id=doc_id,
                start=start,
                end=end,
                title=" > ".join(path),
                heading_path=path,
            )
        )
    return Document(id=doc_id, text=text, passages=tuple(passages))


def _load_jsonl(path: Path) -> Corpus:
    lines, problems = read_jsonl(path, read_text(path, normalize=True))
    rows: list[tuple[int, dict]] = []
    first_line: dict[str, int] = {}
    for n, row in lines:
        pid, text = row.get("id"), row.get("text")
        if not isinstance(pid, str) or not pid.strip():
            problems.append(Problem(str(path), "missing or empty string", n, "id"))
            continue
        if not isinstance(text, str) or not text.strip():
            problems.append(Problem(str(path), "missing or empty text", n, "text"))
            continue
        if pid in first_line:
            problems.append(Problem(str(path), f"duplicate id {pid!r} (first on line {first_line[pid]})", n, "id"))
            continue
        first_line[pid] = n
        rows.append((n, row))
    if problems:
        raise InputError(problems)
    if not rows:
        raise InputError([Problem(str(path), "no passages in the corpus file")])

    # Passages that share a doc_id become one document, in file order.
    grouped: dict[str, list[dict]] = {}
    for _, row in rows:
        grouped.setdefault(str(row.get("doc_id") or row["id"]), []).append(row)
    documents = {}
    for doc_id, members in grouped.items():
        parts, passages, pos = [], [], 0
        for row in members:
            text = unicodedata.normalize("NFC", row["text"])
            title = str(row.get("title") or "")
            passages.append(
                Passage(
                    id=row["id"],
                    text=text,
                    doc_id=doc_id,
                    start=pos,
                    end=pos + len(text),
                    title=title,
                    heading_path=(title,) if title else (),
                )
            )
            parts.append(text)
            pos += len(text) + 2
        documents[doc_id] = Document(id=doc_id, text="\n\n".join(parts), passages=tuple(passages))
    return Corpus(source=str(path), documents=documents)
