"""Citation checks from passage IDs: does each ``[n]`` of an answer name a context, and the right one?

An answer that cites its contexts (``[1]``, ``[1,2]``, ``[1-3]``, ``【1】``, ``[^1]``, RAGFlow's
``[ID:0]``) can be checked mostly without a model: every marker names a context by its number, the
context maps to canonical passages (as for retrieval metrics), and the golden item names the GT
passages. Small pure functions over plain data:

* :func:`cited_sentences` — the answer cut into sentences (Chinese-aware: 。！？；), each with the
  context numbers it cites. A marker written after a sentence's closing mark (``…5 元。【1】``) belongs
  to that sentence, not to the next.
* :func:`score_citations` — per item: marker **validity** (the share of markers naming a context that
  exists), **coverage** (the share of claim sentences carrying a citation; an answer that declines has
  no claims and needs none), **precision** against GT (cited ∩ GT / cited passages) and **recall given
  retrieval** (cited ∩ GT / retrieved ∩ GT: the GT the generator was handed and did cite — a low value
  with full context recall is a generation fault, not a retrieval one).
* Support per cited sentence, ALCE-style (Gao et al., 2023, "Enabling Large Language Models to
  Generate Text with Citations"): a sentence whose markers all name no context is unsupported, one that
  cites a context covering a GT passage is supported (GT passages are hand-checked to hold the answer),
  and only the rest — every marker valid, none on GT — is :attr:`CitationScores.undecided`: a judge
  reads those sentences against their cited contexts (:func:`support_rate` takes its verdicts), so most
  items cost no model call.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ragtrack.text import content_tokens


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


def is_claim(sentence: str) -> bool:
    """A sentence that states something a citation could back: it carries at least one content word
    (not a bare "Yes." or a connective)."""
    return bool(content_tokens(sentence))


@dataclass(frozen=True)
class CitationScores:
    """An item's citation figures; ``None`` where a figure has no denominator (no markers, no claims,
    no GT among the retrieved contexts)."""

    markers: int  # markers written (a range counts each context it spans)
    valid: int  # of them, naming a context that exists
    claims: int  # claim sentences
    cited_claims: int  # of them, carrying at least one marker
    cited_passages: tuple[str, ...]  # the canonical passages of the valid cited contexts, first cited first
    validity: float | None
    coverage: float | None
    precision: float | None
    recall: float | None
    supported: int  # cited sentences supported by their IDs (a context on GT)
    unsupported: int  # cited sentences whose every marker names no context
    undecided: tuple[int, ...] = field(default=())  # indexes into the sentences, for a judge to read


def score_citations(
    sentences: Sequence[CitedSentence],
    contexts: Sequence[Sequence[str]],
    gt: Iterable[str],
    declined: bool = False,
) -> CitationScores:
    """Score an answer's citations.

    ``sentences``: from :func:`cited_sentences`. ``contexts``: per context handed to the generator, in
    the order it was numbered, the canonical passage IDs it covers (empty when it maps to none).
    ``gt``: the item's GT passage IDs. ``declined``: the answer is a refusal, which claims nothing.
    """
    gt_set = set(gt)
    cited: list[str] = []
    markers = valid = claims = cited_claims = supported = unsupported = 0
    undecided: list[int] = []
    for n, sentence in enumerate(sentences):
        exists = [0 <= c < len(contexts) for c in sentence.cites]
        markers += len(sentence.cites)
        valid += sum(exists)
        for c, ok in zip(sentence.cites, exists, strict=True):
            if ok:
                cited.extend(contexts[c])
        if not declined and is_claim(sentence.text):
            claims += 1
            cited_claims += bool(sentence.cites)
        if not sentence.cites:
            continue
        if not any(exists):
            unsupported += 1
        elif any(gt_set & set(contexts[c]) for c, ok in zip(sentence.cites, exists, strict=True) if ok):
            supported += 1
        else:
            undecided.append(n)
    cited_passages = tuple(dict.fromkeys(cited))
    retrieved_gt = gt_set & {pid for context in contexts for pid in context}
    hit = gt_set & set(cited_passages)
    return CitationScores(
        markers=markers,
        valid=valid,
        claims=claims,
        cited_claims=cited_claims,
        cited_passages=cited_passages,
        validity=valid / markers if markers else None,
        coverage=cited_claims / claims if claims else None,
        precision=len(hit) / len(cited_passages) if cited_passages else None,
        recall=len(hit) / len(retrieved_gt) if retrieved_gt else None,
        supported=supported,
        unsupported=unsupported,
        undecided=tuple(undecided),
    )


def support_rate(scores: CitationScores, verdicts: Mapping[int, bool]) -> float | None:
    """The share of cited sentences their citations support (ALCE's citation recall over the cited
    sentences): decided by IDs where they can, by ``verdicts`` (sentence index → the judge's yes/no)
    for :attr:`CitationScores.undecided`. ``None`` when nothing was cited, or a needed verdict is
    missing (a judge that failed decides nothing)."""
    if any(n not in verdicts for n in scores.undecided):
        return None
    cited = scores.supported + scores.unsupported + len(scores.undecided)
    if not cited:
        return None
    return (scores.supported + sum(verdicts[n] for n in scores.undecided)) / cited
