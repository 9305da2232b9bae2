"""Documents → canonical passages with stable IDs.

Every agent version chunks the corpus its own way, yet all of them are scored
against one golden set. That only works if the golden set names *canonical*
passages whose IDs do not depend on any version's chunking. This module
defines them:

* a passage file — JSONL (one passage per line) or a ``.json`` array of
  passages — ``{"id", "text", "title"?, "doc_id"?}``; passages sharing a
  ``doc_id`` form one document (joined by a blank line);
* a folder of ``.md`` / ``.markdown`` / ``.txt`` files: one passage per heading
  section, with ID ``<relative/path>#<slug>/<slug>/...`` (the heading path),
  identical on every machine.

**Headings.** A file gives several signals, and each forms a candidate tree: Markdown headings
(``#`` … ``######`` at the start of a line); numbered headings, the way Chinese (and many plain-text)
documents are written: ``一、`` / ``第一章`` / ``（一）`` / ``1.`` ``1、`` / ``1.1`` / ``1.1.1`` / ``（1）``;
and, only when neither exists, short lines alone between blank lines followed by a longer paragraph.
The tree taken is the one that scores best — one point a heading, minus three for each heading whose
path repeats an earlier one (``# Role`` … ``# Output`` quoted five times in an article is prompt
templates, not its outline) — Markdown first on a tie. When another system was set aside, a warning
names the file, what was taken and what was ignored, and why.

Each numbered style (and each depth of ``1.1.1``) takes the next heading level the first time it
appears, so ``一、`` → ``（一）`` and ``一、`` → ``1.1`` both nest, while ``1.`` / ``1.1`` / ``1.1.1`` keep
their order among themselves. A numbered line is a heading only when it reads like one: a title of at
most :data:`MAX_TITLE_CHARS` characters that does not end in sentence or clause punctuation
(``。！；：，`` …) — a short question (``二、到底该评估什么？``) is a title — and not one of a run of
consecutive lines numbered in the same style (that is a list). ``1. 确认网关在线。`` is a list item;
``1.1 产品简介`` is a heading. The numbering marker is not part of the ID — the slug of ``二、安装与联网``
is ``安装与联网`` — so renumbering sections keeps IDs.

**Code.** Lines inside fenced code (```` ``` ```` / ``~~~``) or an indented code block (4 spaces or a
tab after a blank line) are never headings, nor is a ``#`` or numbered line directly above or below a
line of unfenced code (a shell command, an import, an assignment, a call): ``# 安装依赖`` over
``pip install …`` pasted from a blog is a comment. Heading-like lines found there are reported, as is a
fence that never closes.

**Short passages.** A section of numbered or plain headings shorter than :data:`MIN_SECTION_CHARS`
joins a neighbour (its subsection, else its closer relative, keeping the receiver's ID); Markdown
sections are the author's units and stay whatever their size.

**Long sections.** A section longer than ``max_passage_chars`` (default
:data:`DEFAULT_MAX_PASSAGE_CHARS`) is split at paragraph boundaries (blank
lines): one passage per paragraph, the first keeping the section's ID and the
others numbered ``<id>~p2``, ``<id>~p3`` …; a paragraph that is still too long
is cut at line breaks, then at sentence ends, packed up to the limit; a piece
shorter than :data:`MIN_PASSAGE_CHARS` joins its neighbour.

Loading never hides a surprise: a document without headings, a split section
and heading-like lines in code are :attr:`Corpus.warnings` (file, line), which
the CLI prints. Each passage knows its character span inside its document, so
a version's chunk (itself a span) can be mapped back to the passages it covers.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ragtrack.errors import InputError, Problem
from ragtrack.files import is_text, lone_surrogate, not_utf8_name, read_jsonl, read_text, shown, surrogate_problem
from ragtrack.text import language_of, split_sentences


def suggestion(name: str, known: list[str]) -> str:
    """ "; did you mean: …" for a passage or document ``name`` that is not in ``known``: first the one
    that differs only by full-width characters, spaces or case (an ID typed as a heading is displayed),
    else the closest spellings, else where to list them."""
    folded = {_fold(k): k for k in known}
    if (same := folded.get(_fold(name))) is not None:
        return f"; did you mean: {same}"
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    return f"; did you mean: {', '.join(close)}" if close else "; `ragtrack corpus ls` lists them"


def _fold(text: str) -> str:
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text)).lower()


TEXT_SUFFIXES = (".md", ".markdown", ".txt")
PASSAGE_SUFFIXES = (".jsonl", ".ndjson", ".json")
DEFAULT_MAX_PASSAGE_CHARS = 1500
MAX_TITLE_CHARS = 40
# The shortest piece a long section is split into (see split_long): a one-line paragraph of a pasted
# blog article was a passage of 2 characters.
MIN_PASSAGE_CHARS = 80
# The shortest section of inferred (numbered or plain) headings kept on its own: its heading and a
# fragment. Lower than the above because a manual's numbered sections are short on purpose (the example
# zh-kb's shortest, 包装清单, is 80 characters and cited by its golden set).
MIN_SECTION_CHARS = 30

_ATX = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$")
_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_INDENTED = re.compile(r"^(?: {4}|\t)")
_CN_NUM = "[一二三四五六七八九十百零〇两]+"
# Numbered heading styles: name → pattern with the marker in ``m`` and the title in ``t``.
_NUMBERED = {
    "chapter": re.compile(rf"^\s*(?P<m>第(?:{_CN_NUM}|\d+)[章节部分篇])[ \t　]*(?P<t>.*?)\s*$"),
    "cn": re.compile(rf"^\s*(?P<m>{_CN_NUM}[、．.])[ \t　]*(?P<t>\S.*?)\s*$"),
    "cn_paren": re.compile(rf"^\s*(?P<m>[（(]{_CN_NUM}[）)])[ \t　]*(?P<t>\S.*?)\s*$"),
    # 1.1 / 1.1.1 then a space, a dot or a CJK title (so "2.4GHz" is not one); 1. / 1、 then anything
    "num": re.compile(
        r"^\s*(?P<m>\d{1,3}(?:[.．]\d{1,3})+(?:[.．]|[ \t　]+|(?=[\u4e00-\u9fff]))|\d{1,3}[.．、](?!\d))"
        r"[ \t　]*(?P<t>\S.*?)\s*$"
    ),
    "num_paren": re.compile(r"^\s*(?P<m>[（(]\d{1,3}[）)])[ \t　]*(?P<t>\S.*?)\s*$"),
}
_CLAUSE_END = tuple("。！？；：，、.!?;:,…")


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

    def statements(self) -> list[str]:
        """The passage's sentences that state something: table rows and its own heading line (a ``.txt``
        numbered heading, which the sentence splitter keeps) only when the passage has nothing else."""
        lines = split_sentences(self.text)
        heading = self.heading_path[-1] if self.heading_path else None
        prose = [s for s in lines if not s.startswith("|") and not (heading and s.endswith(heading) and is_title(s))]
        return prose or lines


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    passages: tuple[Passage, ...]
    sectioned: bool = False  # split at headings (False: a heading-less text, or passages from a passage file)

    @property
    def title(self) -> str:
        return self.passages[0].heading_path[0] if self.passages[0].heading_path else self.id


@dataclass
class Corpus:
    """Documents and their passages, indexed by ID, and what loading them had to warn about."""

    source: str
    documents: dict[str, Document]
    warnings: list[Problem] = field(default_factory=list)
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
        """``zh`` or ``en``, judged on up to 400 passages spread evenly over the corpus (the first 400 took
        a mostly Chinese corpus whose English API reference sorts first for English)."""
        passages = list(self.passages.values())
        sample = passages[:: max(1, len(passages) // 400)][:400]
        return language_of("".join(p.text for p in sample))

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


def load_corpus(path: str | Path, max_passage_chars: int = DEFAULT_MAX_PASSAGE_CHARS) -> Corpus:
    """Load a passage file (``.jsonl`` or a ``.json`` array) or a folder of Markdown/text files."""
    path = Path(path)
    if not is_text(str(path)):  # logged as the runs' corpus_path: the store takes UTF-8 only
        raise InputError([Problem(shown(path), not_utf8_name(str(path)))])
    if path.is_dir():
        return _load_folder(path, max_passage_chars)
    if path.is_file() and path.suffix.lower() in PASSAGE_SUFFIXES:
        return _load_passages(path)
    if path.is_file():
        raise InputError(
            [Problem(str(path), "a corpus is a .jsonl (or .json array) passage file, or a folder of .md/.txt files")]
        )
    raise InputError([Problem(str(path), "corpus not found")])


def _load_folder(root: Path, max_passage_chars: int) -> Corpus:
    files = sorted(
        (p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES),
        key=lambda p: p.relative_to(root).as_posix(),
    )
    if not files:
        raise InputError([Problem(str(root), "no .md, .markdown or .txt files in the corpus folder")])
    documents, warnings, unreadable = {}, [], []
    seen: dict[str, str] = {}  # text → the first document that has it
    for f in files:
        rel = f.relative_to(root).as_posix()
        if not is_text(rel):  # every such file at once too (a folder copied from a GBK-named share)
            unreadable.append(Problem(shown(f), not_utf8_name(rel)))
            continue
        try:
            text = read_text(f, normalize=True)
        except InputError as e:  # every such file at once, not one per run (a folder of GBK files)
            unreadable += e.problems
            continue
        if (original := seen.setdefault(text.strip(), rel)) != rel and text.strip():
            warnings.append(
                Problem(
                    str(f),
                    f"the same text as {original}: every passage has a twin there, so retrieval may return "
                    "either copy while a GT ID names one (remove one, or expect lower scores)",
                )
            )
        doc, found = split_document(rel, text, max_passage_chars)
        warnings += [Problem(str(f), w.message, w.line, w.field) for w in found]
        if doc.passages:
            documents[rel] = doc
        elif not found:  # otherwise `corpus ls --doc` would say no such document, with no reason why
            warnings.append(Problem(str(f), "no text: the document is left out"))
    if unreadable:
        raise InputError(unreadable)
    return Corpus(source=str(root), documents=documents, warnings=warnings)


# ---------------------------------------------------------------- headings


@dataclass(frozen=True)
class _Heading:
    line: int  # 0-based line number
    style: str  # "atx1".."atx6", or a numbered style with its depth: "num2", "cn_paren1"
    title: str  # without the numbering marker


def _numbered(line: str) -> tuple[str, str] | None:
    """(style with depth, title) when ``line`` starts with a numbering marker; None otherwise."""
    for name, pattern in _NUMBERED.items():
        m = pattern.match(line)
        if m:
            marker = m.group("m").strip()
            if name == "num":
                style = f"num{re.sub(r'[.．、]$', '', marker).replace('．', '.').count('.') + 1}"
            elif name == "chapter":
                style = f"chapter{marker[-1]}"  # 第一章 and 第一节 are different levels
            else:
                style = name
            return style, m.group("t") or marker
    return None


def _strip_marker(title: str) -> str:
    """A Markdown heading's title without a leading numbering marker (``## 1.1 概述`` → ``概述``)."""
    found = _numbered(title)
    return found[1] if found and found[1] != title else title


def _code_lines(lines: list[str]) -> tuple[set[int], int | None]:
    """Line numbers inside fenced or indented code, and the line of a fence that never closes.

    An indented block starts after a blank line; a column-0 ``#`` line between two of its
    lines (a shell or Python comment pasted flush left) belongs to it too.
    """
    code: set[int] = set()
    fence: int | None = None
    previous_blank, in_indented = True, False
    for i, line in enumerate(lines):
        if fence is not None:
            code.add(i)
            if _FENCE.match(line):
                fence = None
            continue
        if _FENCE.match(line):
            fence, in_indented = i, False
            code.add(i)
            continue
        blank = not line.strip()
        indented = bool(_INDENTED.match(line)) and not blank
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if indented and (previous_blank or in_indented):
            in_indented = True
            code.add(i)
        elif in_indented and line.startswith("#") and _INDENTED.match(following) and following.strip():
            code.add(i)
        elif not blank:
            in_indented = False
        previous_blank = blank
    return code, fence


def _reads_as_title(text: str) -> bool:
    """One short line that does not end like a sentence: a document's title, not a passage of its own."""
    text = text.strip()
    return "\n" not in text and is_title(text)


def is_title(title: str) -> bool:
    """A short line that does not end like a sentence or clause: a heading's title, not a statement."""
    return 0 < len(title) <= MAX_TITLE_CHARS and not title.endswith(_CLAUSE_END) and "。" not in title


def _heading_title(title: str) -> bool:
    """A numbered line's title: a title (:func:`is_title`), or a short question (``二、到底该评估什么？``
    is how Chinese articles title their sections) with no sentence end before its question mark."""
    return is_title(title) or (
        0 < len(title) <= MAX_TITLE_CHARS and title.endswith(("？", "?")) and not re.search("[。！!；;]", title)
    )


def find_headings(lines: list[str]) -> tuple[list[_Heading], list[Problem]]:
    """The heading lines of a document (see the module docstring for the rules) and the warnings a user
    should see: code that looked like headings, and which heading system was taken over which."""
    code, open_fence = _code_lines(lines)
    warnings: list[Problem] = []
    if open_fence is not None:
        unclosed = "code fence opened here never closes: the rest of the file is code"
        warnings.append(Problem("", unclosed, open_fence + 1))
    in_code = [i for i in sorted(code) if _ATX.match(lines[i].strip()) or _numbered(lines[i].strip())]
    in_code = [i for i in in_code if not _FENCE.match(lines[i])]
    if in_code:
        warnings.append(
            Problem(
                "",
                f"{len(in_code)} heading-like line(s) inside code blocks are code, not headings "
                f"(lines {_line_list(in_code)})",
                in_code[0] + 1,
            )
        )
    beside_code = [i for i, line in enumerate(lines) if i not in code and _next_to_code(lines, i)]
    beside_code = [i for i in beside_code if _ATX.match(lines[i]) or _numbered(lines[i])]
    if beside_code:
        warnings.append(
            Problem(
                "",
                f"{len(beside_code)} heading-like line(s) next to unfenced code are taken as code comments, not "
                f"headings (lines {_line_list(beside_code)}: {_quoted(lines, beside_code)})",
                beside_code[0] + 1,
            )
        )
    code |= set(beside_code)

    systems = {
        "Markdown # lines": [
            _Heading(i, f"atx{len(m.group(1))}", _strip_marker(m.group(2).strip()))
            for i, line in enumerate(lines)
            if i not in code and (m := _ATX.match(line))
        ],
        "numbered lines": _numbered_headings(lines, code),
    }
    if not any(systems.values()):
        systems["short lines between blank lines"] = _plain_headings(lines, code)
    scores = {name: _tree_score(heads) for name, heads in systems.items() if heads}
    # Markdown # first on a tie: a Markdown author's headings are declared, numbering is inferred.
    chosen = max(scores, key=lambda name: (scores[name], name == "Markdown # lines"), default="")
    heads = systems.get(chosen, [])
    ignored = {name: h for name, h in systems.items() if h and h is not heads}
    if heads and (chosen != "Markdown # lines" and ignored or chosen == "short lines between blank lines"):
        # Markdown # taken over numbered lines says nothing: a Markdown file's numbered lines are its lists.
        warnings.append(Problem("", _choice(chosen, heads, ignored, lines), heads[0].line + 1))
    return heads, warnings


def _line_list(numbers: list[int], limit: int = 5) -> str:
    return f"{', '.join(str(i + 1) for i in numbers[:limit])}{' …' if len(numbers) > limit else ''}"


def _quoted(lines: list[str], numbers: list[int], limit: int = 3) -> str:
    shown_ = ", ".join(repr(lines[i].strip()[:30]) for i in numbers[:limit])
    return shown_ + (" …" if len(numbers) > limit else "")


def _choice(chosen: str, heads: list[_Heading], ignored: dict[str, list[_Heading]], lines: list[str]) -> str:
    """What was taken as the headings of a document, and what was not (and why), in one line."""
    lines_of = [h.line for h in heads]
    said = f"headings taken: {len(heads)} {chosen} ({_line_list(lines_of)}: {_quoted(lines, lines_of)})"
    for name, others in ignored.items():
        repeated = _repeated_titles(others)
        why = (
            f"their titles repeat ({', '.join(f'{t!r} ×{n}' for t, n in repeated[:3])}), like templates quoted "
            "in the text"
            if repeated
            else "they form a smaller tree"
        )
        others_lines = [h.line for h in others]
        said += f"; ignored: {len(others)} {name} ({_line_list(others_lines)}): {why}"
    return said + " (`ragtrack corpus ls --doc <file>` shows the passages)"


def _repeated_titles(heads: list[_Heading]) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for title in _paths(heads):
        counts[title[-1]] = counts.get(title[-1], 0) + 1
    return sorted(((t, n) for t, n in counts.items() if n > 1), key=lambda tn: -tn[1])


def _tree_score(heads: list[_Heading]) -> int:
    """How well ``heads`` form a document's tree: one point a heading, minus three for each heading whose
    path repeats an earlier one (``# Role`` … ``# Output`` five times over is quoted prompt templates, not
    the document's outline)."""
    paths = _paths(heads)
    return len(paths) - 3 * (len(paths) - len(set(paths)))


def _paths(heads: list[_Heading]) -> list[tuple[str, ...]]:
    """Each heading's path of slugs (its ID's part), as :func:`split_document` builds them."""
    out, stack = [], []
    for head, level in zip(heads, _levels(heads), strict=True):
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, slugify(head.title)))
        out.append(tuple(t for _, t in stack))
    return out


def _numbered_headings(lines: list[str], code: set[int]) -> list[_Heading]:
    candidates = {i: found for i, line in enumerate(lines) if i not in code and (found := _numbered(line))}
    heads = []
    for i, (style, title) in candidates.items():
        in_list = any(candidates.get(j, ("",))[0] == style for j in (i - 1, i + 1))
        if _heading_title(title) and not in_list:
            heads.append(_Heading(i, style, title))
    return heads


_BULLET = re.compile(r"^\s*(?:[-*+•·>|]|\d|[（(])")


def _plain_headings(lines: list[str], code: set[int]) -> list[_Heading]:
    """Short title-like lines alone between blank lines and followed by a longer paragraph: the headings of
    a text that has neither ``#`` nor numbering. The first text line is the document's title, not one."""
    first = next((i for i, line in enumerate(lines) if line.strip()), len(lines))
    heads = []
    for i in range(first + 1, len(lines) - 2):
        line = lines[i].strip()
        if (
            i not in code
            and line
            and not lines[i - 1].strip()
            and not lines[i + 1].strip()
            and is_title(line)
            and not _BULLET.match(line)
            and len(lines[i + 2].strip()) > 2 * len(line)
        ):
            heads.append(_Heading(i, "plain", line))
    return heads if len(heads) >= 2 else []


# A line of unfenced code: a shell command, a Python statement, an assignment, a call, a closing bracket.
# Case-sensitive, as code is: an English sentence starts with a capital ("If the light is red:", "Flux(dev)
# is…"), so a heading above one stays a heading.
_CODE_LIKE = re.compile(
    r"""^\s*(?:
        (?:pip3?|git|cd|docker|docker-compose|npm|npx|yarn|curl|wget|python3?|conda|export|sudo|apt|apt-get
          |brew|ollama|uv|mkdir|ls|cat|echo|kubectl|helm|source|chmod)\s+\S
      | (?:from\s+[\w.]+\s+)?import\s+[\w.]+
      | (?:async\s+)?(?:def|class)\s+\w+
      | (?:return|assert|raise|yield|await)\b
      | (?:for|if|elif|while|with)\s.*:\s*$
      | (?:else|try|finally)\s*:\s*$
      | (?:[a-z_][A-Za-z0-9_.]*|[A-Z][A-Z0-9_]*)(?:\[[^\]]*\])*\s*[-+*/]?=(?!=)
      | [a-z_][A-Za-z0-9_.]*\( | [A-Z]\w*\.[A-Za-z_][\w.]*\(
      | [)\]}]
      | \$\s | >>>\s
    )""",
    re.X,
)


def _next_to_code(lines: list[str], i: int) -> bool:
    """A line directly above or below a line of unfenced code (a comment pasted with it, its ``#`` kept
    or lost): ``# 安装依赖`` over ``pip install …``."""
    return any(0 <= j < len(lines) and _CODE_LIKE.match(lines[j]) for j in (i - 1, i + 1))


def _levels(heads: list[_Heading]) -> list[int]:
    """Markdown levels as written; numbered styles by order of first appearance (1, 2, 3, …), except that
    ``1.`` / ``1.1`` / ``1.1.1`` keep their order among themselves wherever each first appears: an article
    whose ``1.1`` comes before its first ``1.`` still puts ``2.1`` under ``2.``."""
    depth = max((int(h.style[3:]) for h in heads if h.style.startswith("num") and h.style[3:].isdigit()), default=0)
    first: dict[str, int] = {}  # style (all of 1. / 1.1 / 1.1.1 as "num") → the level it took
    out, next_level = [], 1
    for h in heads:
        if h.style.startswith("atx"):
            out.append(int(h.style[3:]))
            continue
        num = h.style.startswith("num") and h.style[3:].isdigit()
        key = "num" if num else h.style
        if key not in first:
            first[key] = next_level
            next_level += depth if num else 1
        out.append(first[key] + (int(h.style[3:]) - 1 if num else 0))
    return out


# ---------------------------------------------------------------- sections → passages


def split_document(
    doc_id: str, text: str, max_passage_chars: int = DEFAULT_MAX_PASSAGE_CHARS
) -> tuple[Document, list[Problem]]:
    """Split one Markdown/text document into passages, one per heading section (long ones split
    further at paragraphs), and the warnings a user should see (``file`` left empty: the caller's).

    A section runs from its heading line to the next heading of any level, so a
    level-2 section's own passage holds its intro text and each level-3 section
    below it is a passage of its own. Sections with no body text are skipped
    (their heading still names their children).
    """
    lines = text.split("\n")
    offsets, pos = [], 0
    for line in lines:
        offsets.append(pos)
        pos += len(line) + 1
    heads, warnings = find_headings(lines)

    sections: list[tuple[int, int, tuple[str, ...], str, int]] = []  # start, end, path, heading line, line no
    if not heads or heads[0].line > 0:
        sections.append((0, offsets[heads[0].line] if heads else len(text), (), "", 0))
    stack: list[tuple[int, str]] = []
    for n, (head, level) in enumerate(zip(heads, _levels(heads), strict=True)):
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, head.title))
        end = offsets[heads[n + 1].line] if n + 1 < len(heads) else len(text)
        sections.append((offsets[head.line], end, tuple(t for _, t in stack), lines[head.line], head.line))

    passages: list[Passage] = []
    seen: dict[str, int] = {}
    for start, end, path, heading_line, line_no in sections:
        base = doc_id + ("#" + "/".join(slugify(h) for h in path) if path else "")
        # Count every section, bodiless ones too, so adding a body never renames a sibling.
        seen[base] = seen.get(base, 0) + 1
        pid = base if seen[base] == 1 else f"{base}~{seen[base]}"
        body = text[start:end]
        if not body[len(heading_line) :].strip():
            continue
        if seen[base] > 1:  # headings that differ only in punctuation, spacing or width slug alike
            warnings.append(
                Problem(
                    "",
                    f"heading {heading_line.strip()!r} gives the ID of an earlier section ({base}): this one is "
                    f"{pid}, which changes if the sections are reordered; retitle one of them",
                    line_no + 1,
                )
            )
        if not path and heads and _reads_as_title(body):
            continue  # a title line above the first heading names the document, like a bodiless heading
        end = start + len(body.rstrip())  # spans hold text only
        pieces = [(start, end)]
        if end - start > max_passage_chars:
            # The heading line stays with the first paragraph of its section.
            pieces = split_long(text, start + len(heading_line), end, max_passage_chars)
            pieces[0] = (start, pieces[0][1])
        if len(pieces) > 1:
            where = f"section {' > '.join(path)!r}" if path else "the text before the first heading"
            if not heads:
                where = "the document (no headings: Markdown #, 一、, （一）, 1.1 …)"
            warnings.append(
                Problem(
                    "",
                    f"{where} is {end - start} characters (limit {max_passage_chars}): split at paragraphs "
                    f"(then lines, then sentence ends) into {len(pieces)} passages {pid}"
                    + (f" and {pid}~p2" if len(pieces) == 2 else f", {pid}~p2 … {pid}~p{len(pieces)}"),
                    line_no + 1,
                )
            )
        for n, (s, e) in enumerate(pieces, start=1):
            passages.append(
                Passage(
                    id=pid if n == 1 else f"{pid}~p{n}",
                    text=text[s:e],
                    doc_id=doc_id,
                    start=s,
                    end=e,
                    title=" > ".join(path),
                    heading_path=path,
                )
            )
    if heads and not heads[0].style.startswith("atx"):
        passages, merged = _merge_short_sections(passages, text, MIN_SECTION_CHARS)
        if merged:
            warnings.append(
                Problem(
                    "",
                    f"{len(merged)} section(s) under {MIN_SECTION_CHARS} characters joined to a neighbour "
                    f"({'; '.join(f'{a} into {b}' for a, b in merged[:3])}{' …' if len(merged) > 3 else ''})",
                    1,
                )
            )
    if not heads and len(passages) == 1:
        warnings.insert(0, Problem("", "no headings (Markdown #, 一、, （一）, 1.1 …): the document is one passage", 1))
    return Document(id=doc_id, text=text, passages=tuple(passages), sectioned=bool(heads)), warnings


def _merge_short_sections(
    passages: list[Passage], text: str, minimum: int
) -> tuple[list[Passage], list[tuple[str, str]]]:
    """Passages of inferred (numbered or plain) sections, each under ``minimum`` characters joined to a
    neighbour: to the next one when that is its subsection (a heading's short intro belongs with it), a
    closer relative than the one before (the first subsection of a chapter goes to its sibling, not to
    the previous chapter's end) or when it is the first, else to the one before. The joined passage keeps
    its receiver's ID. The title block above the first heading stays (it names the document)."""
    out: list[Passage] = []
    merged: list[tuple[str, str]] = []
    carried: Passage | None = None  # a short passage waiting to be joined to the next
    for n, p in enumerate(passages):
        if carried is not None:
            merged.append((carried.id, p.id))
            p = _spanning(p, text, carried.start, p.end)
            carried = None
        if p.end - p.start >= minimum or len(passages) == 1 or not p.heading_path:  # the title block stays
            out.append(p)
            continue
        following = passages[n + 1] if n + 1 < len(passages) else None
        if following is not None and (
            not out or _shared(p, following) == len(p.heading_path) or _shared(p, following) > _shared(p, out[-1])
        ):
            carried = p
        elif out:
            merged.append((p.id, out[-1].id))
            out[-1] = _spanning(out[-1], text, out[-1].start, p.end)
        else:
            out.append(p)
    return out, merged


def _shared(a: Passage, b: Passage) -> int:
    """How many leading headings two passages' paths share."""
    return next(
        (n for n, (x, y) in enumerate(zip(a.heading_path, b.heading_path, strict=False)) if x != y),
        min(len(a.heading_path), len(b.heading_path)),
    )


def _spanning(p: Passage, text: str, start: int, end: int) -> Passage:
    return Passage(p.id, text[start:end], p.doc_id, start, end, p.title, p.heading_path)


def split_markdown(doc_id: str, text: str, max_passage_chars: int = DEFAULT_MAX_PASSAGE_CHARS) -> Document:
    """The passages of one document (its warnings dropped: :func:`split_document` returns them)."""
    return split_document(doc_id, text, max_passage_chars)[0]


_PARAGRAPH_BREAK = re.compile(r"\n[ \t　]*\n")
_SENTENCE_END = re.compile(r"(?<=[。！？；!?;])|(?<=[.])(?=\s)")


def split_long(text: str, start: int, end: int, limit: int) -> list[tuple[int, int]]:
    """Spans of ``text[start:end]``: itself when it fits ``limit``, otherwise one per paragraph (cited as
    ``~pN`` by golden sets, so not repacked), a paragraph still too long cut at line breaks, then at
    sentence ends; none shorter than :data:`MIN_PASSAGE_CHARS` (or a quarter of the limit): those are
    joined to their neighbour, since a blog's one-line paragraphs made 2-character passages."""
    if end - start <= limit:
        return [(start, end)]
    out: list[tuple[int, int]] = []
    pieces = _pieces(text, start, end, _PARAGRAPH_BREAK)
    if len(pieces) > 1 and _reads_as_title(text[slice(*pieces[0])]):
        pieces[:2] = [(pieces[0][0], pieces[1][1])]  # an article's title line stays with its first paragraph
    for s, e in pieces:
        if e - s <= limit:
            out.append((s, e))
            continue
        for ls, le in _packed(text, _pieces(text, s, e, re.compile(r"\n")), limit):
            if le - ls <= limit:
                out.append((ls, le))
            else:
                out += _packed(text, _pieces(text, ls, le, _SENTENCE_END), limit, hard=True)
    return _without_scraps(out, min(MIN_PASSAGE_CHARS, limit // 4))


def _without_scraps(spans: list[tuple[int, int]], minimum: int) -> list[tuple[int, int]]:
    """Consecutive spans of one section, each shorter than ``minimum`` joined to its neighbour (the one
    before, the first one to the one after): a passage of 2 characters answers nothing."""
    out: list[tuple[int, int]] = []
    for s, e in spans:
        if out and (e - s < minimum or out[-1][1] - out[-1][0] < minimum):
            out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def _pieces(text: str, start: int, end: int, separator: re.Pattern) -> list[tuple[int, int]]:
    """Non-blank pieces of ``text[start:end]`` between separators, as trimmed spans."""
    out, pos = [], start
    for m in separator.finditer(text, start, end):
        out.append((pos, m.start()))
        pos = m.end()
    out.append((pos, end))
    spans = []
    for s, e in out:
        piece = text[s:e]
        if piece.strip():
            s += len(piece) - len(piece.lstrip())
            e -= len(piece) - len(piece.rstrip())
            spans.append((s, e))
    return spans


def _packed(text: str, spans: list[tuple[int, int]], limit: int, hard: bool = False) -> list[tuple[int, int]]:
    """Consecutive spans joined while the joined span fits ``limit``; ``hard`` cuts what never fits."""
    out: list[tuple[int, int]] = []
    for s, e in spans:
        if out and e - out[-1][0] <= limit:
            out[-1] = (out[-1][0], e)
        elif hard and e - s > limit:
            out += [(p, min(p + limit, e)) for p in range(s, e, limit)]
        else:
            out.append((s, e))
    return out


# ---------------------------------------------------------------- passage files (JSONL / JSON array)

# Field names other corpus formats use, and the ragtrack field each one stands for.
_FOREIGN_FIELDS = {
    "_id": "id",
    "docid": "id",
    "pid": "id",
    "contents": "text",
    "content": "text",
    "passage": "text",
    "body": "text",
    "document": "text",
}


def _load_passages(path: Path) -> Corpus:
    text = read_text(path, normalize=True)
    if path.suffix.lower() == ".json":
        rows, problems = _json_array(path, text)
    else:
        rows, problems = read_jsonl(path, text)
    kept: list[dict] = []
    first_line: dict[str, int] = {}
    for n, row in rows:
        found = _row_problems(path, n, row)
        if found:
            problems += found
            continue
        pid = row["id"]
        if pid in first_line:
            problems.append(Problem(str(path), f"duplicate id {pid!r} (first on line {first_line[pid]})", n, "id"))
            continue
        first_line[pid] = n
        kept.append(row)
    if problems:
        raise InputError(problems)
    if not kept:
        raise InputError([Problem(str(path), "no passages in the corpus file")])
    return Corpus(source=str(path), documents=_documents(kept))


def _row_problems(path: Path, n: int, row: dict) -> list[Problem]:
    """What keeps one passage row from being a passage, naming the field found instead."""
    problems = []
    for name, kind in (("id", "string"), ("text", "text")):
        value = row.get(name)
        if isinstance(value, str) and value.strip():
            continue
        others = [k for k, v in _FOREIGN_FIELDS.items() if v == name and k in row]
        if value is None and others:
            message = f"missing; this row has {others[0]!r} (another corpus format): rename it to {name!r}"
        elif isinstance(value, bool) or value is None or isinstance(value, str):
            message = "missing or empty string" if name == "id" else "missing or empty text"
        elif isinstance(value, int | float):
            message = f'must be a string, found the number {value!r}: write it as "{value}"'
        else:
            message = f"must be a {kind}, found {type(value).__name__}"
        problems.append(Problem(str(path), message, n, name))
    return problems


def _json_array(path: Path, text: str) -> tuple[list[tuple[int, dict]], list[Problem]]:
    """A ``.json`` corpus: an array of passage objects, each with the line it starts on."""
    decoder = json.JSONDecoder()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        hint = ": one object per line is JSON Lines, name the file .jsonl" if e.msg == "Extra data" else ""
        return [], [Problem(str(path), f"bad JSON: {e.msg} (line {e.lineno}, column {e.colno}){hint}", e.lineno)]
    if not isinstance(data, list):
        found = f"an object with keys {', '.join(list(data)[:5])}" if isinstance(data, dict) else type(data).__name__
        return [], [Problem(str(path), f"a .json corpus is an array of passages; found {found}")]
    rows, problems = [], []
    pos = text.index("[") + 1
    for element in data:
        while text[pos] in " \t\r\n,":
            pos += 1
        line = text.count("\n", 0, pos) + 1
        _, pos = decoder.raw_decode(text, pos)
        if isinstance(element, dict) and (field := lone_surrogate(element)) is not None:
            problems.append(surrogate_problem(path, line, field))
        elif isinstance(element, dict):
            rows.append((line, element))
        else:
            problems.append(Problem(str(path), "each element must be a JSON object", line))
    return rows, problems


def _documents(rows: list[dict]) -> dict[str, Document]:
    """Passages that share a doc_id become one document, in file order."""
    grouped: dict[str, list[dict]] = {}
    for row in rows:
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
    return documents
