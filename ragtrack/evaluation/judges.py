"""LLM-as-a-judge: rubric judges, each an LLM :class:`Step` returning a 1–5 verdict.

* correctness  — answer vs GT answer (the criterion every iteration is judged by);
* groundedness — answer vs retrieved contexts only (hallucination check);
* relevance    — answer vs question only, no contexts (isolates the variable);
* organization — answer vs contexts (did it fuse the material or stitch excerpts).

The judges are a registry: a judge name that is not registered is an error,
never scored by some other judge's heuristic. Prompts live in
``prompts/<lang>/<judge>.md`` (English and Chinese, chosen by the golden set's
language). Replies are untrusted text: :func:`parse_verdict` reads what it
can, the LLM client makes one repair round, and an item that still fails is
recorded as a judge error — excluded from means, counted, never a crash and
never NaN. Offline, each judge is its heuristic.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from importlib import resources

from ragtrack.evaluation import heuristics
from ragtrack.evaluation.citation_judge import SupportStep, support_step
from ragtrack.llm.accounting import Usage
from ragtrack.llm.base import ParseError, Step
from ragtrack.llm.client import LLM
from ragtrack.llm.jsonparse import extract_json, without_reasoning
from ragtrack.records import JudgeRecord
from ragtrack.registry import Registry
from ragtrack.text import chat_messages, format_contexts

LANGUAGES = ("en", "zh")
VERDICT_SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 5}, "reason": {"type": "string"}},
    "required": ["score", "reason"],
}
# Bump when a heuristic changes, so old and new heuristic scores are never compared.
HEURISTIC_VERSION = "h3"
#: The ``judge`` param of a run judged offline, by the heuristics rather than an LLM.
HEURISTIC = "heuristic"
_SCORE = re.compile(r"[\"'“]?score[\"'”]?\s*[:：]\s*[\"'“]?\s*(\d+(?:\.\d+)?)", re.IGNORECASE)
_REASON = re.compile(r"[\"'“]?reason[\"'”]?\s*[:：]\s*[\"'“](.*?)(?:[\"'”]\s*[,}，｝]|$)", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class JudgeInput:
    question: str
    answer: str
    gt_answer: str
    contexts: tuple[str, ...]


@dataclass(frozen=True)
class Judge:
    """A rubric: what it reads, and its offline heuristic (integer 1–5 and a reason in the given language)."""

    name: str
    reads: str
    heuristic: Callable[[JudgeInput, str], tuple[int, str]]
    #: Reads the retrieved contexts: not asked about an answer whose reply did not say what was
    #: retrieved (against no contexts every claim looks unsupported).
    reads_contexts: bool = False


JUDGES: Registry[Judge] = Registry(
    "judge",
    {
        "correctness": Judge(
            "correctness", "answer vs GT answer", lambda i, lang: heuristics.correctness(i.answer, i.gt_answer, lang)
        ),
        "groundedness": Judge(
            "groundedness",
            "answer vs retrieved contexts",
            lambda i, lang: heuristics.groundedness(i.answer, i.contexts, lang),
            reads_contexts=True,
        ),
        "relevance": Judge(
            "relevance", "answer vs question", lambda i, lang: heuristics.relevance(i.question, i.answer, lang)
        ),
        "organization": Judge(
            "organization",
            "answer vs contexts",
            lambda i, lang: heuristics.organization(i.answer, i.contexts, lang),
            reads_contexts=True,
        ),
    },
)


@dataclass(frozen=True)
class Verdict:
    score: int
    reason: str

    @property
    def normalized(self) -> float:
        """1–5 → 0–1."""
        return (self.score - 1) / 4


def _to_score(value: object) -> int:
    if isinstance(value, bool):
        raise ParseError("score is a boolean")
    if isinstance(value, str):
        m = re.match(r"\s*(\d+(?:\.\d+)?)\s*(?:/\s*5)?\s*$", value)
        if not m:
            raise ParseError(f"score {value!r} is not a number")
        value = float(m.group(1))
    if not isinstance(value, int | float):
        raise ParseError(f"score has type {type(value).__name__}")
    if not 1 <= value <= 5:  # also NaN and infinities, which JSON parsers accept
        raise ParseError(f"score {value} is outside 1-5")
    if value != int(value):
        raise ParseError(f"score {value} is not an integer")
    return int(value)


def parse_verdict(text: str) -> Verdict:
    """A verdict from a judge's reply: JSON first, then a tolerant field scan.

    Accepts code fences, surrounding prose, full-width punctuation, a score as a
    string ("4", "4/5") or an integral float; rejects anything outside 1–5.
    A truncated reply whose score is readable keeps the score; a score inside ``<think>``
    reasoning is a draft, never the verdict.
    """
    text = without_reasoning(text)
    try:
        data = extract_json(text)
    except ParseError:
        data = None
    if isinstance(data, dict) and ("score" in data or "Score" in data):
        score = _to_score(data.get("score", data.get("Score")))
        reason = data.get("reason", data.get("Reason"))
        return Verdict(score, "" if reason is None else str(reason).strip())
    m = _SCORE.search(text or "")
    if not m:
        raise ParseError("no score in the reply")
    reason = _REASON.search(text)
    return Verdict(_to_score(m.group(1)), reason.group(1).strip() if reason else "(no reason given)")


def load_prompt(judge: str, language: str) -> str:
    JUDGES.check(judge)
    return resources.files("ragtrack.evaluation").joinpath(f"prompts/{language}/{judge}.md").read_text("utf-8")


#: The heading of a judge prompt's score levels, per language.
_RUBRIC = ("## Rubric", "## 评分标准")


def reviewer_rubric(judge: str, language: str) -> str:
    """What a person labelling ``judge``'s metric reads: the judge prompt's opening (what the metric
    is) and its rubric (the five score levels), so a human score and the judge's mean the same scale.
    The checklists, output format and examples are for the model (and MLflow keeps an instruction
    to 1000 characters)."""
    system = load_prompt(judge, language).split("<<<user>>>")[0].removeprefix("<<<system>>>").strip()
    sections = system.split("\n## ")
    levels = next(s for s in sections[1:] if any(h.removeprefix("## ") == s.split("\n")[0] for h in _RUBRIC))
    return f"{sections[0].strip()}\n\n## {levels.strip()}"


@dataclass
class JudgeStep(Step[JudgeInput, Verdict]):
    """One judge as an LLM step; ``offline`` is its heuristic."""

    judge: str = "correctness"
    language: str = "en"  # of the prompt, and of the heuristic's reasons offline
    #: Graded examples from the project's human labels (``ragtrack judge align``), shown after the prompt's
    #: own instructions. Added to the rendered messages, not to the template: a labelled answer that
    #: happens to contain ``{{answer}}`` stays text.
    examples: str = ""

    def messages(self, inp: JudgeInput) -> list[dict[str, str]]:
        messages = chat_messages(
            self.prompt,
            question=inp.question,
            answer=inp.answer or "(empty answer)",
            gt_answer=inp.gt_answer,
            contexts=format_contexts(inp.contexts),
        )
        if self.examples:
            first = messages[0]
            if first["role"] == "system":
                messages[0] = {**first, "content": first["content"] + "\n\n" + self.examples}
            else:
                messages.insert(0, {"role": "system", "content": self.examples})
        return messages

    def parse(self, text: str) -> Verdict:
        return parse_verdict(text)

    def offline(self, inp: JudgeInput) -> Verdict:
        return Verdict(*JUDGES.get(self.judge).heuristic(inp, self.language))


def judge_steps(
    language: str,
    judges: tuple[str, ...] | None = None,
    max_tokens: int = 160,
    examples: dict[str, str] | None = None,
) -> dict[str, JudgeStep]:
    """Temperature-0 judge steps for ``language`` (``en`` or ``zh``); every registered judge by default.
    ``examples``: judge → graded examples for its prompt (an aligned judge's, this language's)."""
    return {
        j: JudgeStep(
            f"judge.{j}",
            load_prompt(j, language),
            max_tokens=max_tokens,
            temperature=0.0,
            json_schema=VERDICT_SCHEMA,
            judge=j,
            language=language,
            examples=(examples or {}).get(j, ""),
        )
        for j in (judges or JUDGES.names())
    }


def prompt_hash(steps: dict[str, JudgeStep]) -> str:
    """One hash over every judge prompt in use, with an aligned judge's examples: part of the judge identity.
    (A step without examples hashes as before examples existed, so plain runs stay comparable.)"""
    h = hashlib.sha256()
    for name in sorted(steps):
        h.update(name.encode() + b"\0" + steps[name].prompt.encode() + b"\0")
        if steps[name].examples:
            h.update(b"examples\0" + steps[name].examples.encode() + b"\0")
    return h.hexdigest()[:12]


def judge_identity(backend: str, steps: dict[str, JudgeStep], samples: int = 1, aligned: str = "") -> str:
    """(backend, model, prompt hash, temperature, max tokens, samples, alignment): runs judged differently are
    not comparable (a mean of K verdicts is a different, less noisy score than one verdict; a judge shown
    the project's graded examples is another judge). ``aligned``: the aligned judge's digest."""
    if backend == "offline":
        return f"{HEURISTIC}@{HEURISTIC_VERSION}"
    max_tokens = {s.max_tokens for s in steps.values()}
    identity = f"{backend}|prompts={prompt_hash(steps)}|t=0.0|max_tokens={','.join(map(str, sorted(max_tokens)))}"
    identity += f"|samples={samples}@t={SAMPLE_TEMPERATURE}" if samples > 1 else ""
    return identity + (f"|aligned={aligned}" if aligned else "")


#: The temperature of a judge's repeated samples (the first is asked at 0, as a single verdict is): enough
#: to let a judge that is unsure of a verdict say so, and each sample also sends its own seed.
SAMPLE_TEMPERATURE = 0.7


def sample_step(step: JudgeStep, k: int) -> JudgeStep:
    """The ``k``-th of a judge's repeated samples: the step itself for k = 0 (so a run with samples reads
    the cache of single-verdict runs), then at :data:`SAMPLE_TEMPERATURE` with seed k (cached per sample)."""
    return step if k == 0 else replace(step, temperature=SAMPLE_TEMPERATURE, seed=k)


@dataclass
class JudgePanel:
    """The judges of one eval: one LLM (or the heuristics), one prompt language."""

    llm: LLM
    steps: dict[str, JudgeStep]
    language: str
    samples: int = 1  # verdicts per judge and item (``--judge-samples``); 1 for the deterministic heuristics
    aligned: str = ""  # the aligned judge's digest (``ragtrack judge align``); "" for the plain judge

    @property
    def support(self) -> SupportStep:
        """The citation-support check in this panel's language (secondary: not part of the identity a
        promotion compares, which covers the rubric judges)."""
        return support_step(self.language, max((s.max_tokens for s in self.steps.values()), default=160))

    @classmethod
    def create(
        cls,
        llm: LLM,
        language: str,
        max_tokens: int = 160,
        samples: int = 1,
        examples: dict[str, str] | None = None,
        aligned: str = "",
    ) -> JudgePanel:
        """``examples`` (judge → graded examples in ``language``) and ``aligned`` (their digest) come from an
        aligned judge (:mod:`ragtrack.evaluation.alignment`)."""
        steps = judge_steps(language, max_tokens=max_tokens, examples=examples)
        return cls(llm, steps, language, 1 if llm.is_offline else samples, aligned)

    @property
    def identity(self) -> str:
        return judge_identity(self.llm.identity, self.steps, self.samples, self.aligned)

    @property
    def label(self) -> str:
        """What the run's ``judge`` param says: ``heuristic`` or the backend identity."""
        return HEURISTIC if self.llm.is_offline else self.llm.identity

    def judge(
        self, inp: JudgeInput, only: tuple[str, ...] | None = None
    ) -> tuple[dict[str, JudgeRecord], dict[str, Usage]]:
        """Every judge's verdict on one answer (or only those named), and what each call cost.

        With ``samples`` K > 1 each judge is asked K times (:func:`sample_step`); the record keeps every
        score and their mean. A sample that fails makes the judge's verdict an error for this item (asked
        again on resume, where the samples that did come back are read from the cache).

        Raises :class:`~ragtrack.llm.CircuitOpenError` only when the endpoint keeps failing.
        """
        verdicts: dict[str, JudgeRecord] = {}
        usage: dict[str, Usage] = {}
        for name, step in self.steps.items():
            if only is not None and name not in only:
                continue
            usage[step.name] = Usage()
            scores: list[int] = []
            for k in range(self.samples):
                result = self.llm.run(sample_step(step, k), inp)
                usage[step.name].add(result.usage)
                if not result.ok:
                    verdicts[name] = JudgeRecord(None, None, "", error=result.error, raw=result.raw)
                    break
                scores.append(result.value.score)
                if k == 0:
                    first = result.value
            else:
                if self.samples == 1:
                    verdicts[name] = JudgeRecord(first.score, first.normalized, first.reason)
                else:
                    mean = sum(scores) / len(scores)
                    verdicts[name] = JudgeRecord(mean, (mean - 1) / 4, first.reason, samples=scores)
        return verdicts, usage
