"""Heuristic judges: the offline fallback when no LLM judge is configured.

They are lexical, fast and deterministic, and they are *weak*: they cannot
see paraphrase or contradiction. ragtrack logs them as ``judge=heuristic`` so
nobody mistakes them for an LLM's verdict, and ``ragtrack judge calibrate``
measures how far they agree with human labels (see the README).

Each returns an integer score 1–5 and a short reason, like the LLM judges.
"""

from __future__ import annotations

import re

from ragtrack.text import content_tokens, overlap_units, split_sentences, tokens

_BACKTICKED = re.compile(r"`([^`]+)`")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)?(?![\w])")
_IDENTIFIER = re.compile(r"\b[\w-]*[_.\d][\w.-]*\b")
_STITCH = re.compile(
    r"according to (?:the )?(?:source|context|document|passage)\s*\d|\[\d+\]"
    r"|(?:source|context|passage)\s*\d+\s+(?:says|states|mentions)"
    r"|根据(?:资料|上下文|文档|来源)\s*\d|(?:资料|上下文|来源)\s*\d+\s*(?:中|提到|指出|显示)",
    re.IGNORECASE,
)


def _band(ratio: float, cuts: tuple[float, float, float, float] = (0.8, 0.6, 0.4, 0.2)) -> int:
    """Map a 0–1 ratio to 5..1 by descending cut points."""
    for score, cut in zip((5, 4, 3, 2), cuts, strict=True):
        if ratio >= cut:
            return score
    return 1


def key_facts(text: str) -> list[str]:
    """Checkable facts of a reference answer: backticked terms, numbers, identifiers."""
    facts = _BACKTICKED.findall(text)
    rest = _BACKTICKED.sub(" ", text)
    facts += _NUMBER.findall(rest) + [m for m in _IDENTIFIER.findall(rest) if not m.isdigit()]
    return list(dict.fromkeys(f.strip() for f in facts if f.strip()))


def correctness(answer: str, gt_answer: str) -> tuple[int, str]:
    """Share of the reference's key facts and content words that the answer contains."""
    if not answer.strip():
        return 1, "empty answer"
    low = answer.lower()
    facts = key_facts(gt_answer)
    found = [f for f in facts if f.lower() in low]
    gt_words = set(content_tokens(gt_answer))
    word_recall = len(gt_words & set(content_tokens(answer))) / len(gt_words) if gt_words else 0.0
    fact_recall = len(found) / len(facts) if facts else word_recall
    score = _band(0.5 * fact_recall + 0.5 * word_recall)
    missing = [f for f in facts if f not in found][:4]
    reason = f"{len(found)}/{len(facts)} key facts and {word_recall:.0%} of the reference's content words present"
    return score, reason + (f"; missing: {', '.join(missing)}" if missing else "")


def sentence_support(sentence: str, contexts: list[tuple[str, set[str]]]) -> float:
    """Best share of a sentence's units found in one context (given with its units); a context
    that lacks one of the sentence's numbers supports at most half of it (a wrong number is
    not a paraphrase)."""
    units = overlap_units(sentence)
    numbers = set(_NUMBER.findall(sentence))
    best = 0.0
    for ctx, ctx_units in contexts:
        covered = len(units & ctx_units) / len(units) if units else 1.0
        if not all(n in ctx for n in numbers):
            covered = min(covered, 0.5)
        best = max(best, covered)
    return best


def groundedness(answer: str, contexts: tuple[str, ...]) -> tuple[int, str]:
    """Mean support of the answer's sentences; the weakest ones are named in the reason.

    A soft mean rather than a count of fully supported sentences: paraphrase lowers word
    overlap without making a statement unsupported (calibration: Spearman 0.33 → 0.59).
    """
    sentences = split_sentences(answer)
    if not sentences:
        return 1, "empty answer"
    with_units = [(ctx, overlap_units(ctx)) for ctx in contexts]  # once per context, not per sentence
    supports = [sentence_support(s, with_units) for s in sentences]
    score = _band(sum(supports) / len(supports))
    weak = [s for s, v in zip(sentences, supports, strict=True) if v < 0.5]
    if not weak:
        return score, f"all {len(sentences)} statements mostly found in the contexts"
    quoted = "; ".join(f'"{s[:60]}"' for s in weak[:2])
    return score, f"{len(weak)}/{len(sentences)} statements unsupported, e.g. {quoted}"


def relevance(question: str, answer: str) -> tuple[int, str]:
    """Does the answer address the question's content words without merely repeating them?"""
    q_words = set(content_tokens(question))
    a_words = set(content_tokens(answer))
    if not a_words:
        return 1, "empty answer"
    new_words = a_words - q_words
    if len(new_words) <= 1:
        return 1, "the answer only repeats the question"
    coverage = len(q_words & a_words) / len(q_words) if q_words else 1.0
    score = _band(coverage, (0.7, 0.5, 0.3, 0.0001))
    return score, f"the answer addresses {coverage:.0%} of the question's content words"


def copied_share(answer: str, contexts: tuple[str, ...], n: int = 6) -> float:
    """Share of the answer's words inside word ``n``-grams that also occur in the contexts."""
    words = tokens(answer)
    if len(words) < n:
        return 1.0 if words and " ".join(words) in " ".join(tokens(" ".join(contexts))) else 0.0
    source = {tuple(g) for ctx in contexts for g in _ngrams(tokens(ctx), n)}
    covered = [False] * len(words)
    for i, gram in enumerate(_ngrams(words, n)):
        if tuple(gram) in source:
            covered[i : i + n] = [True] * n
    return sum(covered) / len(words)


def _ngrams(words: list[str], n: int) -> list[list[str]]:
    return [words[i : i + n] for i in range(len(words) - n + 1)]


def organization(answer: str, contexts: tuple[str, ...]) -> tuple[int, str]:
    """Penalise stitching marks and verbatim copying of the contexts."""
    if not split_sentences(answer):
        return 1, "empty answer"
    copied = copied_share(answer, contexts)
    # Copy-paste: a whole context reappears in the answer (not just sentences picked from several).
    if any(len(tokens(c)) >= 6 and copied_share(c, (answer,)) >= 0.9 for c in contexts):
        return 1, "pastes a whole context into the answer"
    if _STITCH.search(answer):
        return 3, "stitching marks (source/context references) left in the answer"
    if copied >= 0.75:
        return 3, f"{copied:.0%} of the answer is excerpts copied from the contexts"
    if copied >= 0.4:
        return 4, f"mostly rewritten; {copied:.0%} copied verbatim"
    return 5, "rewritten in its own words with no stitching marks"
