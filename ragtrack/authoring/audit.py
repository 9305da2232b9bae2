"""Step 4 of the SOP: audit each GT answer against its GT passages, and each GT set.

Four checks, as the seeds' auditor prompt has them, plus the GT set's own:
faithfulness (every answer sentence is supported by a GT passage),
completeness and accuracy, sufficiency (nothing the answer needs is missing
from the GT) and minimality (every GT passage is needed). The verdict is
``pass`` or ``needs_change`` with the offending sentences, what is missing and
the superfluous passages.

Offline, the audit is *lexical* and says so: a sentence counts as supported
when at least half of its words (Chinese: character bigrams) are found in one
GT passage, and a passage counts as needed when it supports at least half of
some sentence. It cannot see paraphrase, and it cannot judge sufficiency; it
also checks that the GT fits the item's type (A one passage, B one document,
C and D two or more passages).

The LLM auditor reads a follow-up with its earlier turns before the question;
the lexical audit compares the answer with the passages only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ragtrack.authoring import conversation, label, labelled_passages, resolve_labels
from ragtrack.corpus import Passage
from ragtrack.evaluation.heuristics import sentence_support
from ragtrack.golden import Turn
from ragtrack.llm.base import ParseError, Step
from ragtrack.llm.jsonparse import extract_json
from ragtrack.text import chat_messages, overlap_units, split_sentences

PASS, NEEDS_CHANGE, ERROR = "pass", "needs_change", "error"
AUDIT_SCHEMA = {
    "type": "object",
    "properties": {
        "verdict": {"type": "string", "enum": [PASS, NEEDS_CHANGE]},
        "unsupported": {"type": "array", "items": {"type": "string"}},
        "missing": {"type": "string"},
        "superfluous": {"type": "array", "items": {"type": "string"}},
        "reason": {"type": "string"},
    },
    "required": ["verdict", "unsupported", "missing", "superfluous", "reason"],
}
SUPPORTED = 0.5  # share of a sentence's units found in one passage
HEURISTIC = "offline lexical audit (heuristic)"
_VERDICTS = {
    "pass": PASS,
    "passed": PASS,
    "ok": PASS,
    "通过": PASS,
    "needs_change": NEEDS_CHANGE,
    "needs change": NEEDS_CHANGE,
    "needs-change": NEEDS_CHANGE,
    "fail": NEEDS_CHANGE,
    "failed": NEEDS_CHANGE,
    "需修改": NEEDS_CHANGE,
    "需要修改": NEEDS_CHANGE,
    "不通过": NEEDS_CHANGE,
}


@dataclass(frozen=True)
class AuditInput:
    question: str
    answer: str
    passages: tuple[Passage, ...]
    language: str
    history: tuple[Turn, ...] = ()  # a follow-up's earlier turns


@dataclass(frozen=True)
class AuditVerdict:
    """What the auditor found; ``superfluous`` still as the labels it cited."""

    verdict: str
    unsupported: tuple[str, ...] = ()
    missing: str = ""
    superfluous: tuple[str, ...] = ()
    reason: str = ""


@dataclass
class AuditResult:
    """One item's audit, with superfluous passages as IDs; ``error`` when the auditor's reply was unreadable."""

    item_id: str
    verdict: str
    unsupported: list[str] = field(default_factory=list)
    missing: str = ""
    superfluous: list[str] = field(default_factory=list)
    reason: str = ""
    error: str | None = None
    raw: str | None = None

    @property
    def passed(self) -> bool:
        return self.verdict == PASS

    def to_json(self) -> dict:
        return {k: v for k, v in vars(self).items() if v not in (None, "", [])} | {"verdict": self.verdict}


def _strings(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return ()
    return tuple(s for s in (str(v).strip() for v in value) if s and s.lower() not in ("none", "无", "n/a"))


def parse_audit(text: str) -> AuditVerdict:
    """An auditor's reply (untrusted) → verdict. A ``pass`` that lists problems is taken as ``needs_change``."""
    data = extract_json(text)
    if not isinstance(data, dict):
        raise ParseError('expected {"verdict": ..., ...}')
    raw_verdict = re.sub(r"[【】\[\]\"'\s]+", " ", str(data.get("verdict", data.get("result", "")))).strip().lower()
    verdict = _VERDICTS.get(raw_verdict)
    if verdict is None:
        raise ParseError(f"verdict {data.get('verdict')!r} is neither pass nor needs_change")
    missing = data.get("missing", "")
    missing = "; ".join(_strings(missing)) if not isinstance(missing, str) else missing.strip()
    if missing.lower() in ("none", "无", "n/a", "-"):
        missing = ""
    out = AuditVerdict(
        verdict,
        _strings(data.get("unsupported")),
        missing,
        _strings(data.get("superfluous")),
        str(data.get("reason", "")).strip(),
    )
    if out.verdict == PASS and (out.unsupported or out.missing or out.superfluous):
        return AuditVerdict(NEEDS_CHANGE, out.unsupported, out.missing, out.superfluous, out.reason)
    return out


def lexical_audit(inp: AuditInput) -> AuditVerdict:
    """The offline audit: unsupported sentences and passages that support none (see the module doc)."""
    sentences = split_sentences(inp.answer)
    with_units = [(p.text, overlap_units(p.text)) for p in inp.passages]
    unsupported = tuple(s for s in sentences if sentence_support(s, with_units) < SUPPORTED)
    superfluous = tuple(
        label(n)
        for n, ctx in enumerate(with_units, start=1)
        if not any(sentence_support(s, [ctx]) >= SUPPORTED for s in sentences)
    )
    zh = inp.language == "zh"
    if not unsupported and not superfluous:
        reason = (
            f"{len(sentences)} 句都能在 GT 段落中找到，每个段落都支撑了至少一句（词面检查，不判断充分性）"
            if zh
            else f"all {len(sentences)} sentences found in the GT passages, each passage supports one "
            "(lexical check; sufficiency not judged)"
        )
        return AuditVerdict(PASS, reason=reason)
    parts = []
    if unsupported:
        parts.append(f"{len(unsupported)} 句在 GT 段落中找不到" if zh else f"{len(unsupported)} sentence(s) not found")
    if superfluous:
        parts.append("有段落没有支撑任何一句" if zh else "passage(s) that support no sentence")
    return AuditVerdict(NEEDS_CHANGE, unsupported, "", superfluous, "；".join(parts) if zh else "; ".join(parts))


@dataclass
class AuditStep(Step[AuditInput, AuditVerdict]):
    """The GT auditor; offline, the lexical audit."""

    def messages(self, inp: AuditInput) -> list[dict[str, str]]:
        return chat_messages(
            self.prompt,
            question=inp.question,
            answer=inp.answer,
            passages=labelled_passages(inp.passages),
            history=conversation(inp.history, inp.language),
        )

    def parse(self, text: str) -> AuditVerdict:
        return parse_audit(text)

    def offline(self, inp: AuditInput) -> AuditVerdict:
        return lexical_audit(inp)


def result_of(item_id: str, verdict: AuditVerdict, passages: tuple[Passage, ...]) -> AuditResult:
    """The verdict with passage labels turned back into IDs (a label the item does not have is reported)."""
    ids, unknown = resolve_labels(list(verdict.superfluous), passages)
    reason = verdict.reason + (f" (unknown passage labels: {', '.join(unknown)})" if unknown else "")
    return AuditResult(item_id, verdict.verdict, list(verdict.unsupported), verdict.missing, ids, reason)
