"""Small text helpers shared by the offline steps and the heuristic judges.

Language-aware (English word tokens, jieba for Chinese) and deterministic.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Iterable

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_MD_PREFIX = re.compile(r"^\s*(?:#{1,6}\s+|[-*+]\s+|\d+[.)]\s+|>\s*)")
# A sentence ends at . ! ? (followed by space) or at Chinese 。！？；, or at a line break.
_SENT_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9`\"'(\[])|(?<=[。！？；])|\n+")
_EN_WORD = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*")

STOPWORDS_EN = frozenset(
    """a an the and or but if then else of to in on at by for with from into onto about as is are was
    were be been being it its this that these those there here do does did done doing have has had
    having i you he she we they me my your our their his her them us what which who whom whose when
    where why how can could should would will shall may might must not no nor so than too very just
    also only own same such both each few more most other some any all again further once up down out
    over under off s t don now get got use using used one two please tell know want need like make
    way thing things i'm it's what's there's""".split()
)
STOPWORDS_ZH = frozenset(
    """的 了 和 是 在 我 有 也 就 都 而 及 与 着 或 一个 没有 我们 你 吗 呢 吧 啊 怎么 什么 如何 哪些
    哪个 为什么 可以 这个 那个 请问""".split()
)


# What apps say when they will not answer: matched at the start of the answer or as the whole of it.
_REFUSALS = re.compile(
    r"^\W*(?:(?:sorry|unfortunately)\b.{0,40}?)?"
    r"(?:i (?:could not|couldn't|cannot|can't|was unable to|am unable to|do not|don't) (?:find|answer|help|know)"
    r"|(?:there is |i have )?no (?:relevant )?(?:information|answer|results?)"
    r"|the (?:knowledge base|documents?|context) (?:does|do) not (?:contain|mention|say))"
    r"|^\W*(?:抱歉|对不起|很遗憾)?[，,。\s]*(?:我)?(?:无法|不能|没有|未能|暂时无法)(?:找到|回答|检索到|查到|提供)"
    r"|(?:知识库|资料|文档)中?(?:没有|未)(?:找到|包含|提到)",
    re.IGNORECASE,
)


def is_refusal(answer: str) -> bool:
    """The answer declines ("I could not find this…", "抱歉，知识库中没有找到…") or is empty: one rule for an
    evaluated answer (it claims nothing to cite) and a production message (triage, the monitor)."""
    return not answer.strip() or bool(_REFUSALS.search(answer.strip()[:200]))


def is_chinese(text: str) -> bool:
    """More than a fifth of the letters are CJK ideographs: the one language rule ragtrack uses."""
    letters = sum(ch.isalpha() for ch in text) or 1
    return len(_CJK.findall(text)) / letters > 0.2


def language_of(text: str) -> str:
    """``zh`` or ``en`` by :func:`is_chinese` (corpus, golden set and judge prompts alike)."""
    return "zh" if is_chinese(text) else "en"


# A sentence ending in none of these is closed before the next one (a colon leads into it).
_ENDS = ("。", "！", "？", "；", "…", "”", "」", ".", "!", "?", ":", "：", '"', ")")


def join_sentences(sentences: Iterable[str], language: str) -> str:
    """Sentences as one text, each still a statement of its own. A line without a closing mark (a list
    item, a table cell, a command) would run into the next (``驱动macOS 会…``, ``steps: 4 The
    default…``): a Chinese one is given its full stop, any other a line of its own. Chinese sentences
    are joined end to end, others with a space between."""
    zh = language == "zh"
    closed = []
    for s in sentences:
        if s.endswith(_ENDS):
            closed.append(s if zh else s + " ")
        else:
            closed.append(s + ("。" if zh and is_chinese(s) else "\n"))
    return "".join(closed).rstrip()


def strip_markdown(line: str) -> str:
    return _MD_PREFIX.sub("", line).replace("**", "").strip()


def split_sentences(text: str) -> list[str]:
    """Sentences of a Markdown passage; heading lines are dropped (they are not statements)."""
    out = []
    for line in text.split("\n"):
        if re.match(r"^\s*#{1,6}\s", line) or re.match(r"^\s*(```|~~~)", line):
            continue
        for piece in _SENT_END.split(strip_markdown(line)):
            piece = piece.strip()
            if len(piece) > 2:
                out.append(piece)
    return out


def zh_words(text: str) -> list[str]:
    """Lower-cased jieba words, punctuation dropped.

    Accurate mode, not search mode: search mode adds every sub-word of a long word
    as well, which inflates matches on common fragments (BM25 on RGB-int, all-hops@5:
    0.23 with search mode, 0.27 with accurate mode).
    """
    import jieba

    jieba.setLogLevel(60)
    return [w for w in (piece.strip().lower() for piece in jieba.cut(text)) if w and not re.fullmatch(r"\W+", w)]


def tokens(text: str) -> list[str]:
    """Lower-cased word tokens (jieba words for Chinese text)."""
    return zh_words(text) if is_chinese(text) else _EN_WORD.findall(text.lower())


def content_tokens(text: str) -> list[str]:
    """Tokens without stopwords: the words that carry a sentence's facts."""
    stop = STOPWORDS_ZH if is_chinese(text) else STOPWORDS_EN
    return [t for t in tokens(text) if t not in stop and not (len(t) == 1 and t.isascii())]


def _stem(word: str) -> str:
    """Crude English suffix stripping: enough for "nodes"/"node" and "loaded"/"loads" to meet."""
    for suffix in ("ing", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def overlap_units(text: str) -> set[str]:
    """Units for "is this statement in that text?": stemmed English content words, or
    Chinese character bigrams (word segmentation of a paraphrase rarely matches its source)."""
    if is_chinese(text):
        chars = re.sub(r"\W", "", text.lower())
        return {chars[i : i + 2] for i in range(len(chars) - 1)}
    return {_stem(w) for w in content_tokens(text)}


def keywords(text: str, k: int, document_frequency: Counter | None = None, n_docs: int = 1) -> list[str]:
    """The ``k`` most characteristic content words (TF, or TF-IDF when frequencies are given)."""
    counts = Counter(content_tokens(text))
    if document_frequency:
        import math

        def weight(word: str) -> float:
            return counts[word] * math.log((1 + n_docs) / (1 + document_frequency.get(word, 0)))
    else:

        def weight(word: str) -> float:
            return counts[word]

    order = {w: n for n, w in enumerate(counts)}
    return sorted(counts, key=lambda w: (-weight(w), order[w]))[:k]


def document_frequencies(texts: Iterable[str]) -> tuple[Counter, int]:
    df: Counter = Counter()
    n = 0
    for text in texts:
        df.update(set(content_tokens(text)))
        n += 1
    return df, n


def format_contexts(contexts: tuple[str, ...]) -> str:
    """Numbered contexts as a prompt shows them to a model (generator and judges alike)."""
    return "\n\n".join(f"[{n}] {c.strip()}" for n, c in enumerate(contexts, start=1)) or "(no context)"


# What a template writes as a placeholder: ``{{name}}`` (filled by render when the step knows ``name``),
# and ``{name}`` with single braces (a slip: never filled, so the model would read it as it stands).
_PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}|(?<!\{)\{\s*([A-Za-z_]\w*)\s*\}(?!\})")


def template_problems(template: str, step: str, needs: tuple[str, ...], takes: tuple[str, ...]) -> list[str]:
    """Why ``template`` would not show the ``step``'s inputs to the model: it is empty, it lacks a
    placeholder the step ``needs``, or it writes one the step does not fill (``takes``: all it fills);
    [] when sound."""
    if not template.strip():
        return [f"is empty (the {step} step needs {', '.join(f'{{{{{name}}}}}' for name in needs)})"]
    problems: list[str] = []
    written = {m.group(1) for m in _PLACEHOLDER.finditer(template)}
    for token in dict.fromkeys(m.group(0) for m in _PLACEHOLDER.finditer(template)):  # each once, in order
        name = token.strip("{} ")
        if token == f"{{{{{name}}}}}" and name in takes:
            continue
        near = difflib.get_close_matches(name, takes, n=1, cutoff=0.6)
        if not token.startswith("{{"):
            hint = f" (a placeholder has double braces: {{{{{near[0] if near else name}}}}})"
        elif name in takes:  # spaces inside the braces
            hint = f" (write {{{{{name}}}}}, without spaces)"
        else:
            hint = f" (did you mean {{{{{near[0]}}}}}?)" if near else ""
        problems.append(f"names {token}, which the {step} step does not fill{hint}")
    problems += [f"lacks {{{{{name}}}}}, which the {step} step needs" for name in needs if name not in written]
    return problems


def render(template: str, **values: str) -> str:
    """Fill ``{{name}}`` placeholders (JSON braces in prompts stay untouched)."""
    for name, value in values.items():
        template = template.replace("{{" + name + "}}", value)
    return template


def chat_messages(template: str, **values: str) -> list[dict[str, str]]:
    """A prompt file → chat messages. ``<<<system>>>`` / ``<<<user>>>`` lines split the roles;
    a file without markers is one user message."""
    text = render(template, **values)
    if "<<<user>>>" not in text:
        return [{"role": "user", "content": text.strip()}]
    system, _, user = text.partition("<<<user>>>")
    system = system.replace("<<<system>>>", "").strip()
    messages = [{"role": "system", "content": system}] if system else []
    return [*messages, {"role": "user", "content": user.strip()}]
