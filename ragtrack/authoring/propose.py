"""Step 1 of the SOP: propose candidate questions of a requested type from documents.

With an LLM, one call per requested type sees the documents' passages (each
labelled ``P1``, ``P2``, …) and returns candidates that cite the passages they
were drawn from — the suggested GT — with a solution path and a draft answer.

Offline, a deterministic *template* proposer stands in, and every candidate it
writes says so (tag ``template``, a note): it turns a passage's key sentence
(the one with a number, or with the passage's most distinctive words) into a
fill-in-the-blank question (A), asks for the points of a section's
subsections (B), pairs passages of two documents that share distinctive words
(C), and follows a term that one passage mentions to the passage of another
document whose heading names it (D). The questions read like templates because
they are: a person rewrites them in a user's words during review.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

from ragtrack.authoring import label, labelled_passages
from ragtrack.corpus import Passage
from ragtrack.llm.base import ParseError, Step
from ragtrack.llm.jsonparse import extract_json
from ragtrack.text import chat_messages, content_tokens, document_frequencies, keywords, split_sentences

PROPOSE_SCHEMA = {
    "type": "object",
    "properties": {
        "candidates": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "question": {"type": "string"},
                    "type": {"type": "string", "enum": ["A", "B", "C", "D"]},
                    "passages": {"type": "array", "items": {"type": "string"}},
                    "solution_path": {"type": "string"},
                    "draft_answer": {"type": "string"},
                },
                "required": ["question", "type", "passages", "solution_path", "draft_answer"],
            },
        }
    },
    "required": ["candidates"],
}

TYPE_NAMES = {
    "en": {
        "A": "single point, one passage answers it",
        "B": "scattered over several passages of one document",
        "C": "comparison or synthesis of two topics",
        "D": "multi-hop, a clue in one passage leads to the answer in another",
    },
    "zh": {
        "A": "单跳-单点，一个段落即可回答",
        "B": "单跳-离散，答案分散在同一文档的多个段落",
        "C": "跨主题对比/融合",
        "D": "多跳推理，先由一个段落找到线索，再到另一个段落找答案",
    },
}
#: Types whose questions span documents: they need passages of at least two documents.
MULTI_DOCUMENT = ("C", "D")
TEMPLATE_TAG = "template"
TEMPLATE_NOTE = {
    "en": "Offline template, written without a language model from headings and key sentences: "
    "rewrite the question the way a user would ask it, and check the GT passages, before accepting.",
    "zh": "离线模板：未使用大模型，由标题和关键句自动拼出。接受之前请把问题改写成用户的真实问法，并核对 GT 段落。",
}
_NUMBER = re.compile(r"(?<![A-Za-z_])\d+(?:[.,:：]\d+)*")
_TYPE = re.compile(r"^\s*(?:type|类型)?\s*([ABCD])\b", re.IGNORECASE)
BLANK = "____"


@dataclass(frozen=True)
class ProposeInput:
    type: str
    n: int
    passages: tuple[Passage, ...]
    language: str


@dataclass(frozen=True)
class RawCandidate:
    """A candidate as the proposer wrote it: passages still as the labels it cited."""

    question: str
    type: str
    labels: tuple[str, ...]
    solution_path: str = ""
    draft_answer: str = ""
    template: bool = False


@dataclass(frozen=True)
class ProposeOutput:
    candidates: tuple[RawCandidate, ...]
    dropped: tuple[str, ...] = ()  # why some of the reply's candidates were unusable


def _text(value: object) -> str:
    return value.strip() if isinstance(value, str) else ""


def parse_candidates(text: str) -> ProposeOutput:
    """Candidates from a proposer's reply (untrusted): ``{"candidates": [...]}`` or a bare list.

    Each unusable entry (no question, no type A-D, no passages) is dropped with a
    reason; a reply with entries but none usable is a parse error (one repair round).
    """
    data = extract_json(text)
    entries = data.get("candidates", data.get("questions")) if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise ParseError('expected {"candidates": [...]}')
    kept, dropped = [], []
    for n, entry in enumerate(entries, start=1):
        if not isinstance(entry, dict):
            dropped.append(f"candidate {n}: not an object")
            continue
        question = _text(entry.get("question"))
        m = _TYPE.match(str(entry.get("type", "")))
        labels = entry.get("passages", entry.get("gt", []))
        labels = [labels] if isinstance(labels, str | int) else labels
        if not question:
            dropped.append(f"candidate {n}: no question")
        elif m is None:
            dropped.append(f"candidate {n}: type {entry.get('type')!r} is not A, B, C or D")
        elif not isinstance(labels, list) or not labels:
            dropped.append(f"candidate {n}: cites no passage")
        else:
            kept.append(
                RawCandidate(
                    question,
                    m.group(1).upper(),
                    tuple(str(v) for v in labels),
                    _text(entry.get("solution_path") or entry.get("reasoning")),
                    _text(entry.get("draft_answer") or entry.get("answer")),
                )
            )
    if entries and not kept:
        raise ParseError("no usable candidate: " + "; ".join(dropped[:3]))
    return ProposeOutput(tuple(kept), tuple(dropped))


@dataclass
class ProposeStep(Step[ProposeInput, ProposeOutput]):
    """Propose ``n`` candidates of one type from labelled passages; offline, the template proposer."""

    type_names: dict[str, dict[str, str]] = field(default_factory=lambda: TYPE_NAMES, repr=False)

    def messages(self, inp: ProposeInput) -> list[dict[str, str]]:
        return chat_messages(
            self.prompt,
            passages=labelled_passages(inp.passages),
            n=str(inp.n),
            type=inp.type,
            type_name=self.type_names[inp.language][inp.type],
        )

    def parse(self, text: str) -> ProposeOutput:
        return parse_candidates(text)

    def offline(self, inp: ProposeInput) -> ProposeOutput:
        return ProposeOutput(tuple(template_candidates(inp)))


# ---------------------------------------------------------------- the offline template proposer


@dataclass
class _Material:
    """The passages with what the templates need: labels, key sentences, distinctive words."""

    passages: tuple[Passage, ...]
    language: str
    df: Counter = field(init=False)
    n_docs: int = field(init=False)
    position: dict[str, int] = field(init=False)
    # Per passage ID: the templates rank, filter and then use the same passages, and tokenising
    # (jieba for Chinese) is the cost: once per passage, not once per look.
    _keywords: dict[str, list[str]] = field(init=False, default_factory=dict)
    _key_sentences: dict[str, str] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.df, self.n_docs = document_frequencies(p.text for p in self.passages)
        self.position = {p.id: n for n, p in enumerate(self.passages)}

    def label(self, p: Passage) -> str:
        return label(self.position[p.id] + 1)

    def keywords(self, p: Passage) -> list[str]:
        if p.id not in self._keywords:
            self._keywords[p.id] = keywords(p.text, 8, self.df, self.n_docs)
        return self._keywords[p.id]

    def idf(self, word: str) -> float:
        return math.log((1 + self.n_docs) / (1 + self.df.get(word, 0)))

    def key_sentence(self, p: Passage) -> str:
        """The sentence with a number and the most distinctive words (first one on ties)."""
        if p.id not in self._key_sentences:
            sentences = split_sentences(p.text)
            top = set(self.keywords(p))

            def score(s: str) -> tuple[bool, int]:
                return bool(_NUMBER.search(s)), len(set(content_tokens(s)) & top)

            self._key_sentences[p.id] = max(sentences, key=score) if sentences else ""
        return self._key_sentences[p.id]

    def cloze(self, p: Passage) -> tuple[str, str] | None:
        """(sentence with one fact blanked out, the sentence): its first number, else its most distinctive word."""
        sentence = self.key_sentence(p)
        if not sentence:
            return None
        if m := _NUMBER.search(sentence):
            return sentence[: m.start()] + BLANK + sentence[m.end() :], sentence
        for word in self.keywords(p):
            if word in sentence.lower() and len(word) > 1:
                start = sentence.lower().index(word)
                return sentence[:start] + BLANK + sentence[start + len(word) :], sentence
        return None


def _heading(p: Passage) -> str:
    return p.heading_path[-1] if p.heading_path else p.doc_id


def _join(parts: list[str], language: str) -> str:
    return ("" if language == "zh" else " ").join(parts)


def _labels(material: _Material, passages: list[Passage]) -> tuple[str, ...]:
    return tuple(material.label(p) for p in passages)


#: A type-B question lists every part of a section; past this many its GT would be unwieldy.
MAX_PARTS = 4


def template_candidates(inp: ProposeInput) -> list[RawCandidate]:
    """Deterministic candidates of ``inp.type`` from headings and key sentences (see the module doc)."""
    material = _Material(inp.passages, inp.language)
    make = {"A": _single_point, "B": _scattered, "C": _comparison, "D": _multi_hop}[inp.type]
    return make(material, inp.n)


def _single_point(m: _Material, n: int) -> list[RawCandidate]:
    zh = m.language == "zh"
    ranked = sorted(
        (p for p in m.passages if m.cloze(p)),
        key=lambda p: (not _NUMBER.search(m.key_sentence(p)), m.position[p.id]),
    )
    out = []
    for p in ranked[:n]:
        blanked, sentence = m.cloze(p)
        q = (
            f"「{_heading(p)}」一节写道：“{blanked}”——横线处应填什么？"
            if zh
            else f'The section "{_heading(p)}" says: "{blanked}" What goes in the blank?'
        )
        path = f"答案就在 {m.label(p)}（{_heading(p)}）这一段。" if zh else f"{m.label(p)} ({_heading(p)}) states it."
        out.append(RawCandidate(q, "A", (m.label(p),), path, sentence, template=True))
    return out


def _scattered(m: _Material, n: int) -> list[RawCandidate]:
    """Type B: every part of one section (its subsections; a flat document's paragraphs). A long part's
    ``~pN`` splits are one part, named by its first passage; a section of more than ``MAX_PARTS``
    parts is asked about its first ones, and the question says so."""
    zh = m.language == "zh"
    groups: dict[tuple[str, tuple[str, ...]], dict[object, Passage]] = {}
    for p in m.passages:
        if len(p.heading_path) >= 2:
            groups.setdefault((p.doc_id, p.heading_path[:-1]), {}).setdefault(p.heading_path, p)
    if not any(len(g) >= 2 for g in groups.values()):  # a flat document: its passages are the parts
        groups = {}
        for p in m.passages:
            groups.setdefault((p.doc_id, ()), {})[p.id] = p
    ranked = sorted(
        ((key, list(g.values())) for key, g in groups.items() if len(g) >= 2),
        key=lambda kv: (len(kv[1]) > MAX_PARTS, -min(len(kv[1]), MAX_PARTS), m.position[kv[1][0].id]),
    )
    out = []
    for (doc_id, parent), parts in ranked[:n]:
        name = parent[-1] if parent else doc_id
        members = parts[:MAX_PARTS]
        if len(parts) <= MAX_PARTS:
            q = (
                f"「{name}」这部分一共讲了哪几点？请把 {len(members)} 个小节的要点都列出来。"
                if zh
                else f'What does "{name}" cover? List the points of all {len(members)} of its parts.'
            )
        else:
            q = (
                f"「{name}」的前 {len(members)} 个小节各讲了什么？请列出要点。"
                if zh
                else f'What do the first {len(members)} parts of "{name}" say? List their points.'
            )
        labels = "、".join(_labels(m, members)) if zh else ", ".join(_labels(m, members))
        path = f"要点分散在同一文档的 {labels} 中，需逐段汇总。" if zh else f"The points are spread over {labels}."
        draft = _join([m.key_sentence(p) for p in members], m.language)
        out.append(RawCandidate(q, "B", _labels(m, members), path, draft, template=True))
    return out


def _comparison(m: _Material, n: int) -> list[RawCandidate]:
    zh = m.language == "zh"
    words = {p.id: set(m.keywords(p)) for p in m.passages}
    pairs = []
    for i, a in enumerate(m.passages):
        for j in range(i + 1, len(m.passages)):
            b = m.passages[j]
            if a.doc_id == b.doc_id:
                continue
            shared = sorted(words[a.id] & words[b.id], key=lambda w: (-m.idf(w) * len(w), w))
            if shared:
                pairs.append((-sum(m.idf(w) for w in shared), i, j, a, b, shared))
    pairs.sort(key=lambda t: t[:3])
    out, used = [], set()
    for *_, a, b, shared in pairs:
        if len(out) == n:
            break
        if a.id in used or b.id in used:
            continue
        used |= {a.id, b.id}
        topic = shared[0]
        q = (
            f"「{_heading(a)}」和「{_heading(b)}」都涉及“{topic}”，两者有什么相同和不同之处？"
            if zh
            else f'"{_heading(a)}" and "{_heading(b)}" both concern "{topic}": how do they compare?'
        )
        path = (
            f"分别从 {m.label(a)} 和 {m.label(b)}（两份文档）取出“{topic}”的说法，再对照。"
            if zh
            else f'Take what {m.label(a)} and {m.label(b)} (two documents) say about "{topic}" and compare.'
        )
        draft = _join([m.key_sentence(a), m.key_sentence(b)], m.language)
        out.append(RawCandidate(q, "C", (m.label(a), m.label(b)), path, draft, template=True))
    return out


def _multi_hop(m: _Material, n: int) -> list[RawCandidate]:
    """A term of one passage's heading that another document's passage mentions is the bridge."""
    zh = m.language == "zh"
    bridges = []
    for j, target in enumerate(m.passages):
        if not m.cloze(target):
            continue
        terms = [t for t in content_tokens(_heading(target)) if len(t) >= (2 if zh else 4)]
        for i, clue in enumerate(m.passages):
            if clue.doc_id == target.doc_id:
                continue
            found = [t for t in terms if t in clue.text.lower() and t not in _heading(clue).lower()]
            if found:
                term = max(found, key=lambda t: (m.idf(t), len(t), t))  # the rarest term makes the real bridge
                bridges.append((-m.idf(term), i, j, clue, target, term))
    bridges.sort(key=lambda t: t[:3])
    out, used = [], set()
    for *_, clue, target, term in bridges:
        if len(out) == n:
            break
        if clue.id in used or target.id in used:
            continue
        used |= {clue.id, target.id}
        blanked, sentence = m.cloze(target)
        q = (
            f"「{_heading(clue)}」里提到了“{term}”。顺着这条线索查下去：“{blanked}”——横线处应填什么？"
            if zh
            else f'"{_heading(clue)}" mentions "{term}". Following that lead: "{blanked}" What goes in the blank?'
        )
        path = (
            f"先在 {m.label(clue)}（{_heading(clue)}）找到线索“{term}”，"
            f"再到 {m.label(target)}（{_heading(target)}）找答案。"
            if zh
            else f'{m.label(clue)} ({_heading(clue)}) mentions "{term}"; {m.label(target)} ({_heading(target)}) '
            "holds the answer."
        )
        out.append(RawCandidate(q, "D", (m.label(clue), m.label(target)), path, sentence, template=True))
    return out
