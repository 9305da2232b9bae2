"""Citation checks from passage IDs: does each ``[n]`` of an answer name a context, and the right one?

An answer that cites its contexts (``[1]``, ``[1,2]``, ``[1-3]``, ``【1】``, ``[^1]``, RAGFlow's
``[ID:0]``) can be checked mostly without a model: every marker names a context by its number, the
context maps to canonical passages (as for retrieval metrics), and the golden item names the GT
passages. Small pure functions over plain data:

* :func:`ragtrack.citation_markers.cited_sentences` cuts the answer into sentences, each with the
  context numbers it cites;
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

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ragtrack.citation_markers import CitedSentence
from ragtrack.text import content_tokens


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
