"""Step 1 of the SOP: propose candidate questions of a requested type from documents.

With an LLM, one call per requested type sees the documents' passages (each
labelled ``P1``, ``P2``, …) and returns candidates that cite the passages they
were drawn from — the suggested GT — with a solution path and a draft answer.

Offline, a deterministic *template* proposer stands in, and every candidate it
writes says so (tag ``template``, a note): it turns a passage's key sentence
(the one with a number, or with the passage's most distinctive words) into the
question that sentence answers — how much/how many for a number, why for a
reason, what for a definition, how for a step — (A), asks what a section says
about its topic (B), pairs passages of two documents that share distinctive
words (C), and follows a term that one passage mentions to the passage of another
document whose heading names it (D). Never a fill-in-the-blank, never a question
about how a section is numbered or cut: the questions are ones a user could ask,
though plainer than a user's; a person rewrites them in a user's words during
review.
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

    def ask(self, p: Passage) -> tuple[str, str] | None:
        """(the question the passage's key sentence answers, the sentence), or None when it answers none
        that reads as one (see :func:`question_for`)."""
        sentence = self.key_sentence(p)
        # A file name is no topic a user asks about: a heading-less passage's is its most distinctive word.
        words = [w for w in self.keywords(p) if len(w) > 1 and w in sentence.lower()] if sentence else []
        topic = p.heading_path[-1] if p.heading_path else (words[0] if words else "")
        question = question_for(sentence, topic, self.language) if sentence else None
        return (question, sentence) if question else None


_UNIT_ZH = re.compile(
    r"^\s*(%|％|个|次|天|小时|分钟|秒|毫秒|年|月|周|元|公里|千米|毫升|升|克|千克|公斤|米|厘米|毫米|字符|字|条|步|页|位|倍|种|台"
    r"|人|伏|瓦|度|GB|MB|KB|ms|s)"
)
_UNIT_EN = re.compile(r"^\s*(%|[A-Za-z]+)")
_REASON_ZH = re.compile(
    r"^(?P<effect>.+?)[，,]\s*(?:因为|由于|是因为)(?P<cause>.+)$|^(?:因为|由于)(?P<cause2>.+?)[，,](?:所以|因此)?(?P<effect2>.+)$"
)
_DEFINE_ZH = re.compile(r"^(?P<subject>[^，,。；：:]{2,16}?)(?:是指|指的是|是)(?P<rest>.{4,})$")
_DEFINE_EN = re.compile(r"^(?P<subject>(?:An?|The)?\s*[\w .-]{2,40}?)\s+(?:is|are|means)\s+(?P<rest>.{6,})$")
_STEP_ZH = re.compile(r"(?:点击|打开|进入|设置|安装|运行|执行|选择|输入|按住|长按|重启|填入|填写)")
_ASKING = re.compile(r"[？?]\s*$")


def question_for(sentence: str, topic: str, language: str) -> str | None:
    """The question a statement answers, written from its own words: its number asked as how many / how
    much (the clause up to it, the rest dropped), a cause as why, a definition as what, a step as how;
    else what the statement says of its topic. ``None`` for a sentence that is itself a question."""
    sentence = sentence.strip().rstrip("。.!！;；")
    if not sentence or _ASKING.search(sentence):
        return None
    topic = topic.strip()
    if language == "zh":
        if found := _counted_zh(sentence):
            m, u = found
            clause_end = re.search(r"[，,；;。]", sentence[m.end() :])
            head = sentence[: m.start()].rstrip()
            tail = sentence[m.end() + u.end() : m.end() + clause_end.start() if clause_end else len(sentence)]
            return f"{head}多少{u.group(1).strip()}{tail.strip()}？"
        if m := _REASON_ZH.match(sentence):
            effect = (m.group("effect") or m.group("effect2") or "").strip()
            return f"为什么{effect}？" if effect else None
        if m := _DEFINE_ZH.match(sentence):
            return f"{m.group('subject').strip()}是什么？"
        if _STEP_ZH.search(sentence) and topic:
            return f"{topic}应该怎么做？"
        return f"关于{topic}，需要知道什么？" if topic else None
    if found := _counted_en(sentence):
        m, u = found
        unit = u.group(1)
        many = "what percentage" if unit == "%" else f"how many {unit}"
        head = sentence[: m.start()].rstrip()
        clause_end = re.search(r"[,;]", sentence[m.end() :])
        tail = sentence[m.end() + u.end() : m.end() + clause_end.start() if clause_end else len(sentence)]
        return f"{head} {many}{tail.rstrip()}?".strip()
    if (m := re.match(r"^(?P<effect>.+?),?\s+because\s+.+$", sentence, re.I)) is not None:
        return f"Why is it that {m.group('effect')[0].lower()}{m.group('effect')[1:]}?"
    if m := _DEFINE_EN.match(sentence):
        subject = _lower_first(m.group("subject").strip())
        verb = "are" if subject.endswith("s") and not subject.endswith("ss") else "is"
        return f"What {verb} {subject}?"
    return f"What should I know about {_lower_first(topic)}?" if topic else None


# Chinese numerals count too (三克茶叶, 一百五十毫升), but not a lone 一 (一个, 一滴: "a", "one").
_CJK_DIGITS = "零一两二三四五六七八九十百千万"
_CJK_NUMBER = re.compile(rf"[{_CJK_DIGITS[2:]}零][{_CJK_DIGITS}]*|一[{_CJK_DIGITS}]+")


def _counted_zh(sentence: str) -> tuple[re.Match, re.Match] | None:
    """The first number, Arabic or Chinese, followed by a unit (``90 天``, ``三百公里``)."""
    for pattern in (_NUMBER, _CJK_NUMBER):
        for m in pattern.finditer(sentence):
            if u := _UNIT_ZH.match(sentence[m.end() :]):
                return m, u
    return None


_NOT_UNITS = frozenset("a an and are as at be by for from in is it of on or the to was were with".split())


def _counted_en(sentence: str) -> tuple[re.Match, re.Match] | None:
    """The first number that counts something (``2 models``, ``30 %``), not a version (``SDXL 1.0 was``,
    ``SD1.5 checkpoint``)."""
    for m in _NUMBER.finditer(sentence):
        u = _UNIT_EN.match(sentence[m.end() :])
        part_of_a_name = m.start() > 0 and (sentence[m.start() - 1].isalpha() or sentence[m.start() - 1] == ".")
        if (
            u
            and not part_of_a_name
            and u.group(1).lower() not in _NOT_UNITS
            and (u.group(1) == "%" or "." not in m.group())
        ):
            return m, u
    return None


def _lower_first(text: str) -> str:
    """ "The gateway" → "the gateway"; an acronym ("SDXL", "VRAM") stays."""
    return text if text[:2].isupper() else text[:1].lower() + text[1:]


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
        (p for p in m.passages if m.ask(p)),
        key=lambda p: (not _NUMBER.search(m.key_sentence(p)), m.position[p.id]),
    )
    out = []
    for p in ranked[:n]:
        q, sentence = m.ask(p)
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
        # What a user asks of a topic, not of how the document cut it into parts.
        q = f"{name}有哪些要点？" if zh else f"What are the main points about {_lower_first(name)}?"
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
        if not m.ask(target):
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
        asked, sentence = m.ask(target)
        if clue.heading_path:
            q = f"{_heading(clue)}提到了{term}——{asked}" if zh else f"{_heading(clue)} mentions {term}: {asked}"
        else:
            q = f"说到{term}：{asked}" if zh else f"Speaking of {term}: {asked}"
        path = (
            f"先在 {m.label(clue)}（{_heading(clue)}）找到线索“{term}”，"
            f"再到 {m.label(target)}（{_heading(target)}）找答案。"
            if zh
            else f'{m.label(clue)} ({_heading(clue)}) mentions "{term}"; {m.label(target)} ({_heading(target)}) '
            "holds the answer."
        )
        out.append(RawCandidate(q, "D", (m.label(clue), m.label(target)), path, sentence, template=True))
    return out
