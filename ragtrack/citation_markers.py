"""Citation markers in an answer: ``[1]``, ``[1,2]``, ``[1-3]``, ``【1】``, ``[^1]``, RAGFlow's ``[ID:0]``.

Reading them is plain text work that agents (to show an answer without its markers) and evaluation
(to score what each sentence cites, :mod:`ragtrack.evaluation.citations`) share: the marker styles
are a registry, an answer is cut into sentences Chinese-aware (。！？；), and a marker written after a
sentence's closing mark (``…5 元。【1】``) belongs to that sentence, not to the next.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class MarkerStyle:
    """One way of writing citation markers: a pattern whose group ``refs`` holds the numbers, and the
    number of the first context (1 for ``[1]``, 0 for RAGFlow's ``[ID:0]``)."""

    name: str
    pattern: re.Pattern[str]
    first: int


#: The marker styles, by the name an agent spec gives in ``cite_markers``.
STYLES: dict[str, MarkerStyle] = {
    s.name: s
    for s in (
        # [1]  [1,2]  [1, 3]  [1-3]  [1–3]  【1】  【1,2】  [^1]
        MarkerStyle(
            "numeric",
            re.compile(r"(?:\[\^?|【)(?P<refs>\d+(?:\s*[,，、\-–]\s*\d+)*)(?:\]|】)"),
            1,
        ),
        MarkerStyle("ragflow", re.compile(r"\[ID:\s*(?P<refs>\d+)\]"), 0),
    )
}
#: What an agent cites with unless its spec says otherwise.
DEFAULT_STYLES: tuple[str, ...] = ("numeric",)

# A sentence ends after 。！？； (or . ! ? followed by space) or at a line break.
_SENTENCE_END = re.compile(r"(?<=[。！？；])|(?<=[.!?])\s+|\n+")
_LONGEST_RANGE = 50  # [1-100000] is not a citation of a hundred thousand contexts


def style(name: str) -> MarkerStyle:
    """The marker style called ``name``; an unknown name is an error listing the known ones."""
    try:
        return STYLES[name]
    except KeyError:
        raise ValueError(f"unknown citation marker style {name!r}; expected one of {', '.join(STYLES)}") from None


def _refs(text: str, first: int) -> list[int]:
    """``"1, 3-5"`` → 0-based context positions [0, 2, 3, 4] (``first`` is the number of context 0)."""
    out: list[int] = []
    for part in re.split(r"\s*[,，、]\s*", text.strip()):
        span = re.fullmatch(r"(\d+)(?:\s*[\-–]\s*(\d+))?", part)
        if not span:
            continue
        a = int(span[1])
        b = int(span[2]) if span[2] else a
        if b < a or b - a > _LONGEST_RANGE:
            b = a
        out.extend(n - first for n in range(a, b + 1))
    return out


def strip_markers(answer: str, styles: Sequence[str] = DEFAULT_STYLES) -> str:
    """The answer as a reader sees it: the markers removed, and the spaces before them."""
    for name in styles:
        answer = re.sub(r"[ \t]*" + style(name).pattern.pattern, "", answer)
    return answer.strip()


@dataclass(frozen=True)
class CitedSentence:
    """One sentence of an answer without its markers, and the 0-based context positions it cites
    (in the order written, repeats kept; a position may name no context)."""

    text: str
    cites: tuple[int, ...] = ()


def _markers(text: str, patterns: Sequence[MarkerStyle]) -> list[tuple[int, int, list[int]]]:
    """Every marker in ``text`` as (start, end, 0-based context positions), in reading order."""
    found = [(m.start(), m.end(), _refs(m.group("refs"), s.first)) for s in patterns for m in s.pattern.finditer(text)]
    return sorted(found, key=lambda hit: hit[0])


def _tidy(text: str) -> str:
    """White space folded, and none left before punctuation where a marker was cut out."""
    return re.sub(r"\s+([。！？；，,.!?;:：])", r"\1", re.sub(r"\s+", " ", text)).strip()


def cited_sentences(answer: str, styles: Sequence[str] = DEFAULT_STYLES) -> list[CitedSentence]:
    """The sentences of ``answer`` with the contexts each cites. Markers that open a sentence are moved
    to the sentence before (they were written after its closing mark); empty pieces are dropped."""
    patterns = [style(name) for name in styles]
    sentences: list[CitedSentence] = []

    def cite_previous(refs: list[int]) -> None:
        sentences[-1] = CitedSentence(sentences[-1].text, sentences[-1].cites + tuple(refs))

    for piece in _SENTENCE_END.split(answer):
        parts: list[str] = []
        cites: list[int] = []
        leading: list[int] = []  # markers before any text: they close the sentence before
        pos = 0
        for start, end, refs in _markers(piece, patterns):
            parts.append(piece[pos:start])
            pos = end
            (cites if "".join(parts).strip() else leading).extend(refs)
        text = _tidy("".join(parts) + piece[pos:])
        if leading and sentences:
            cite_previous(leading)
        else:
            cites = leading + cites
        if text.strip("。！？；.!?;:： "):
            sentences.append(CitedSentence(text, tuple(cites)))
        elif cites and sentences:
            cite_previous(cites)
    return sentences
