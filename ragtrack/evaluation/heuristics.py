"""Heuristic judges: the offline fallback when no LLM judge is configured.

They are lexical, fast and deterministic, and they are *weak*: they cannot
see paraphrase or contradiction. ragtrack logs them as ``judge=heuristic`` so
nobody mistakes them for an LLM's verdict, and ``ragtrack judge calibrate``
measures how far they agree with human labels (see the README).

Each returns an integer score 1–5 and a short reason, like the LLM judges, in
the judges' language (the golden set's: a Chinese golden set gets Chinese reasons).
"""

from __future__ import annotations

import re

from ragtrack.text import content_tokens, is_chinese, overlap_units, split_sentences, tokens

_BACKTICKED = re.compile(r"`([^`]+)`")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)?(?![\w])")
_IDENTIFIER = re.compile(r"\b[\w-]*[_.\d][\w.-]*\b")
_STITCH = re.compile(
    r"according to (?:the )?(?:source|context|document|passage)\s*\d|\[\d+\]"
    r"|(?:source|context|passage)\s*\d+\s+(?:says|states|mentions)"
    r"|根据(?:资料|上下文|文档|来源)\s*\d|(?:资料|上下文|来源)\s*\d+\s*(?:中|提到|指出|显示)",
    re.IGNORECASE,
)


# Every reason a heuristic gives, per language; filled with str.format.
REASONS = {
    "en": {
        "empty": "empty answer",
        "correctness": "{found}/{facts} key facts and {words:.0%} of the reference's content words present",
        "correctness_words": "{words:.0%} of the reference's content words present (no numbers or names to check)",
        "missing": "; missing: {items}",
        "grounded": "all {n} statements mostly found in the contexts",
        "ungrounded": "{weak}/{n} statements unsupported, e.g. {quoted}",
        "parrot": "the answer only repeats the question",
        "relevance": "the answer addresses {coverage:.0%} of the question's content words",
        "paste": "pastes a whole context into the answer",
        "stitched": "stitching marks (source/context references) left in the answer",
        "copied": "{copied:.0%} of the answer is excerpts copied from the contexts",
        "mostly_rewritten": "mostly rewritten; {copied:.0%} copied verbatim",
        "rewritten": "rewritten in its own words with no stitching marks",
    },
    "zh": {
        "empty": "回答为空",
        "correctness": "参考答案的 {facts} 个关键事实中出现了 {found} 个，实词覆盖 {words:.0%}",
        "correctness_words": "参考答案的实词覆盖 {words:.0%}（没有可核对的数字或名称）",
        "missing": "；缺少：{items}",
        "grounded": "全部 {n} 句陈述基本都能在检索内容中找到",
        "ungrounded": "{n} 句陈述中有 {weak} 句缺少依据，例如 {quoted}",
        "parrot": "回答只是重复了问题",
        "relevance": "回答覆盖了问题中 {coverage:.0%} 的实词",
        "paste": "把一整段检索内容原样贴进了回答",
        "stitched": "回答中留有拼接痕迹（引用资料编号）",
        "copied": "回答有 {copied:.0%} 是从检索内容原样摘抄的",
        "mostly_rewritten": "大部分经过改写；原样摘抄 {copied:.0%}",
        "rewritten": "用自己的话组织，没有拼接痕迹",
    },
}


def _reason(language: str, key: str, **values: object) -> str:
    return REASONS.get(language, REASONS["en"])[key].format(**values)


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


def correctness(answer: str, gt_answer: str, language: str = "en") -> tuple[int, str]:
    """Share of the reference's key facts and content words that the answer contains.

    Chinese content words are looked up by characters, not matched as whole jieba words:
    jieba cuts the same name differently in different sentences (the reference's "龙松"
    sits inside the answer's word "林龙松"), and a word that appears in the answer's text
    is there, however the segmenter grouped it.
    """
    if not answer.strip():
        return 1, _reason(language, "empty")
    low = answer.lower()
    facts = key_facts(gt_answer)
    found = [f for f in facts if f.lower() in low]
    gt_words = set(content_tokens(gt_answer))
    chinese = is_chinese(gt_answer)
    present = {w for w in gt_words if w in low} if chinese else gt_words & set(content_tokens(answer))
    word_recall = len(present) / len(gt_words) if gt_words else 0.0
    fact_recall = len(found) / len(facts) if facts else word_recall
    score = _band(0.5 * fact_recall + 0.5 * word_recall)
    missing = [f for f in facts if f not in found][:4]
    kind = "correctness" if facts else "correctness_words"
    reason = _reason(language, kind, found=len(found), facts=len(facts), words=word_recall)
    sep = "、" if language == "zh" else ", "
    return score, reason + (_reason(language, "missing", items=sep.join(missing)) if missing else "")


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


def groundedness(answer: str, contexts: tuple[str, ...], language: str = "en") -> tuple[int, str]:
    """Mean support of the answer's sentences; the weakest ones are named in the reason.

    A soft mean rather than a count of fully supported sentences: paraphrase lowers word
    overlap without making a statement unsupported (calibration: Spearman 0.33 → 0.59).
    """
    sentences = split_sentences(answer)
    if not sentences:
        return 1, _reason(language, "empty")
    with_units = [(ctx, overlap_units(ctx)) for ctx in contexts]  # once per context, not per sentence
    supports = [sentence_support(s, with_units) for s in sentences]
    score = _band(sum(supports) / len(supports))
    weak = [s for s, v in zip(sentences, supports, strict=True) if v < 0.5]
    if not weak:
        return score, _reason(language, "grounded", n=len(sentences))
    quoted = "; ".join(f"“{s[:60]}”" if language == "zh" else f'"{s[:60]}"' for s in weak[:2])
    return score, _reason(language, "ungrounded", weak=len(weak), n=len(sentences), quoted=quoted)


def relevance(question: str, answer: str, language: str = "en") -> tuple[int, str]:
    """Does the answer address the question's content words without merely repeating them?"""
    q_words = set(content_tokens(question))
    a_words = set(content_tokens(answer))
    if not a_words:
        return 1, _reason(language, "empty")
    new_words = a_words - q_words
    if len(new_words) <= 1:
        return 1, _reason(language, "parrot")
    coverage = len(q_words & a_words) / len(q_words) if q_words else 1.0
    score = _band(coverage, (0.7, 0.5, 0.3, 0.0001))
    return score, _reason(language, "relevance", coverage=coverage)


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


def organization(answer: str, contexts: tuple[str, ...], language: str = "en") -> tuple[int, str]:
    """Penalise stitching marks and verbatim copying of the contexts."""
    if not split_sentences(answer):
        return 1, _reason(language, "empty")
    copied = copied_share(answer, contexts)
    # Copy-paste: a whole context reappears in the answer (not just sentences picked from several).
    if any(len(tokens(c)) >= 6 and copied_share(c, (answer,)) >= 0.9 for c in contexts):
        return 1, _reason(language, "paste")
    if _STITCH.search(answer):
        return 3, _reason(language, "stitched")
    if copied >= 0.75:
        return 3, _reason(language, "copied", copied=copied)
    if copied >= 0.4:
        return 4, _reason(language, "mostly_rewritten", copied=copied)
    return 5, _reason(language, "rewritten")
