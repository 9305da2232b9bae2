"""Aligning an LLM judge to the project's human labels with graded few-shot examples.

The shipped judge prompts carry generic examples; a judge still tends to have its own
scale (one point generous, or never giving a 1). ``ragtrack judge align`` shows each judge
3–5 of the project's hand-labelled cases, with their human scores, and keeps the
examples only when they make the judge agree better with the labels it was *not* shown:

1. :func:`split_cases` — per judge, the labelled cases split into a pool the examples
   come from and a held-out split agreement is measured on; seeded, stratified by
   (language, label) so both sides see every level;
2. :func:`pick_examples` — per judge and language, one pool case per level, levels
   spread over the score range, the shortest case of each level (a shorter prompt);
3. :func:`improved` — the aligned judge is kept only when, on the held-out split, no
   figure (exact, within-one, Spearman, errors) is worse and at least one is better.

An aligned judge (:class:`AlignedJudge`) is a JSON file, ``judges/aligned/<judge>.json``;
its digest, over the examples, is part of the judge identity of every run that uses it,
so its verdicts are never cached, compared or promoted as the plain judge's.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from ragtrack.errors import InputError, Problem, RagtrackError, problems_from_validation
from ragtrack.evaluation.calibration import Agreement, CalibrationCase
from ragtrack.evaluation.judges import LANGUAGES, load_prompt
from ragtrack.files import atomic_write_json, read_text
from ragtrack.text import format_contexts

#: Where aligned judges live in a project, one file per judge LLM.
ALIGNED_DIR = "judges/aligned"
#: The seeds recommend 3–5 graded examples in a judge prompt.
MIN_EXAMPLES, MAX_EXAMPLES = 3, 5
#: Share of each (language, label) stratum that goes to the example pool; the rest is held out.
POOL_SHARE = 0.3
FORMAT = 1

#: The heading of the examples block in a judge's prompt (the loopback stand-in judge looks for it).
HEADING = {"en": "## Graded examples from this project's reviewers", "zh": "## 本项目评审人打过分的示例"}
_INTRO = {
    "en": "A reviewer who knows this domain scored these answers with the rubric above. "
    "Use their scale: score a new answer as they would.",
    "zh": "以下回答由熟悉本领域的评审人按上面的评分标准打分。请沿用他们的尺度，像他们那样给新回答打分。",
}
_EXAMPLE = {"en": "Reviewed example {n}", "zh": "评审示例 {n}"}
_REPLY = {"en": "Reply", "zh": "回复"}
_FIELDS = {  # what a judge's prompt reads ({{name}} in it) → how an example names it
    "en": {"question": "Question", "gt_answer": "Reference answer", "contexts": "Contexts", "answer": "Answer"},
    "zh": {"question": "问题", "gt_answer": "参考答案", "contexts": "资料", "answer": "回答"},
}
_NO_REASON = {"en": "Scored {score} by the reviewer.", "zh": "评审人打 {score} 分。"}
_COLON = {"en": ": ", "zh": "："}


@dataclass(frozen=True)
class Split:
    """One judge's labelled cases: the pool examples are picked from, and the held-out split."""

    pool: tuple[CalibrationCase, ...]
    held_out: tuple[CalibrationCase, ...]


def pool_size(n: int, share: float = POOL_SHARE) -> int:
    """How many of a stratum's ``n`` cases go to the pool: ``share`` of them rounded half up, at least one
    and at most all but one, so a level with two or more cases is on both sides; a lone case is held out
    (agreement needs it more than the examples do)."""
    if n < 2:
        return 0
    return min(n - 1, max(1, math.floor(n * share + 0.5)))


def split_cases(cases: list[CalibrationCase], judge: str, seed: int = 0, share: float = POOL_SHARE) -> Split:
    """The cases labelled for ``judge``, split per (language, label) stratum: each stratum, in id order,
    shuffled by a generator seeded with ``seed`` and the judge's name, gives its first :func:`pool_size`
    cases to the pool. Both sides keep the cases' file order."""
    strata: dict[tuple[str, int], list[CalibrationCase]] = defaultdict(list)
    for case in cases:
        if judge in case.labels:
            strata[(case.lang, case.labels[judge])].append(case)
    rng = random.Random(f"{seed}:{judge}")
    pooled: set[str] = set()
    for key in sorted(strata):
        members = sorted(strata[key], key=lambda c: c.id)
        rng.shuffle(members)
        pooled.update(c.id for c in members[: pool_size(len(members), share)])
    labelled = [c for c in cases if judge in c.labels]
    return Split(tuple(c for c in labelled if c.id in pooled), tuple(c for c in labelled if c.id not in pooled))


def _length(case: CalibrationCase) -> int:
    return len(case.question) + len(case.answer) + len(case.gt_answer) + sum(map(len, case.contexts))


def pick_examples(
    pool: tuple[CalibrationCase, ...] | list[CalibrationCase], judge: str, language: str, count: int = MAX_EXAMPLES
) -> list[CalibrationCase]:
    """Up to ``count`` graded examples for ``judge`` in ``language``, lowest score first: the pool's levels
    spread evenly over its range (all of them when there are no more than ``count``), of each level the
    shortest case (ties: by id); fewer than :data:`MIN_EXAMPLES` levels are filled up to it with each
    level's next shortest. Empty when the pool cannot give :data:`MIN_EXAMPLES`."""
    by_level: dict[int, list[CalibrationCase]] = defaultdict(list)
    for case in pool:
        if case.lang == language and judge in case.labels:
            by_level[case.labels[judge]].append(case)
    for members in by_level.values():
        members.sort(key=lambda c: (_length(c), c.id))
    levels = sorted(by_level)
    if len(levels) > count:  # evenly spaced over the range, both ends included
        levels = sorted({levels[math.floor(i * (len(levels) - 1) / (count - 1) + 0.5)] for i in range(count)})
    chosen = [by_level[level][0] for level in levels]
    depth = 1
    while len(chosen) < MIN_EXAMPLES and any(len(by_level[lv]) > depth for lv in levels):
        chosen += [by_level[lv][depth] for lv in levels if len(by_level[lv]) > depth][: MIN_EXAMPLES - len(chosen)]
        depth += 1
    if len(chosen) < MIN_EXAMPLES:
        return []
    return sorted(chosen, key=lambda c: (c.labels[judge], _length(c), c.id))


def fields_read(judge: str, language: str) -> list[str]:
    """The inputs ``judge``'s prompt shows it (its ``{{placeholders}}``), in the prompt's order: an example
    shows the same, so it teaches the scale on what the judge sees."""
    return list(dict.fromkeys(re.findall(r"\{\{(\w+)\}\}", load_prompt(judge, language))))


def render_examples(examples: list[CalibrationCase], judge: str, language: str) -> str:
    """The examples block added to ``judge``'s prompt: each example's inputs and the reviewer's reply (the
    label, and the case's note as the reason)."""
    names, colon = _FIELDS[language], _COLON[language]
    blocks = [HEADING[language], _INTRO[language]]
    for n, case in enumerate(examples, start=1):
        values = {
            "question": case.question,
            "gt_answer": case.gt_answer,
            "contexts": format_contexts(case.contexts),
            "answer": case.answer or "(empty answer)",
        }
        score = case.labels[judge]
        reason = case.note.strip() or _NO_REASON[language].format(score=score)
        lines = [_EXAMPLE[language].format(n=n)]
        lines += [f"{names[f]}{colon}{values[f]}" for f in fields_read(judge, language) if f in values]
        lines.append(f"{_REPLY[language]}{colon}" + json.dumps({"score": score, "reason": reason}, ensure_ascii=False))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _rises(before: float | None, after: float | None) -> int:
    """+1 better, -1 worse, 0 the same (or not comparable: undefined on both sides)."""
    if before is None and after is None:
        return 0
    if before is None or after is None:  # defined on one side only: a constant judge has no ranking
        return 1 if before is None else -1
    return (after > before) - (after < before)


def improved(before: Agreement, after: Agreement) -> bool:
    """Held-out agreement improved: exact, within-one and Spearman none lower, judge errors none higher,
    and at least one of them better. Strict on purpose: a judge that trades within-one for exact
    agreement is another judge, not a better one."""
    moves = [
        _rises(before.exact, after.exact),
        _rises(before.within_one, after.within_one),
        _rises(before.spearman, after.spearman),
        _rises(float(-before.errors), float(-after.errors)),
    ]
    return min(moves) >= 0 and max(moves) > 0


class AlignedJudgeFile(BaseModel):
    """The saved form of an aligned judge (``judges/aligned/<judge>.json``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: int
    judge: str  # the judge LLM's name, as --judge takes it
    llm: str  # its identity (backend, model, base URL) when aligned
    digest: str
    seed: int
    cases: str  # the labelled cases it was aligned on
    examples: dict[str, dict[str, list[str]]]  # judge → language → example case ids
    prompts: dict[str, dict[str, str]]  # judge → language → the examples block its prompt gains
    agreement: dict[str, dict[str, dict[str, float | None]]]  # judge → before/after → figures
    held_out: dict[str, list[str]]  # judge → the held-out case ids agreement was measured on
    run_id: str = ""


def digest_of(prompts: dict[str, dict[str, str]]) -> str:
    """What identifies an aligned judge: a hash of the examples its prompts gain (nothing else changes a
    verdict)."""
    return hashlib.sha256(json.dumps(prompts, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:12]


def aligned_path(root: str | Path, judge: str) -> Path:
    """``judges/aligned/<judge>.json`` in the project, the judge's name made a file name."""
    return Path(root) / ALIGNED_DIR / (re.sub(r"[^A-Za-z0-9._-]+", "-", judge).strip("-.") + ".json")


@dataclass(frozen=True)
class AlignedJudge:
    """An aligned judge as an eval uses it: where it is, its digest, each language's examples per judge."""

    path: Path
    digest: str
    prompts: dict[str, dict[str, str]]  # judge → language → examples block
    saved: AlignedJudgeFile

    def examples(self, language: str) -> dict[str, str]:
        """judge → examples block, for the judges aligned in ``language``."""
        return {judge: by_lang[language] for judge, by_lang in self.prompts.items() if language in by_lang}

    @property
    def judges(self) -> list[str]:
        return sorted(self.prompts)


def save_aligned(path: Path, saved: AlignedJudgeFile) -> None:
    atomic_write_json(path, saved.model_dump(mode="json"))


def load_aligned(root: str | Path, judge: str, llm_identity: str) -> AlignedJudge:
    """The aligned judge saved for ``judge``; an error that says what to run when there is none, when the
    file was edited (its digest no longer matches its examples) or when it was aligned for another model
    or endpoint (the improvement was measured on that one)."""
    path = aligned_path(root, judge)
    if not path.is_file():
        raise RagtrackError(
            f"no aligned judge for {judge} ({path} not found): run `ragtrack judge align --judge {judge}` first, "
            "or evaluate with the plain judge (--plain-judge)"
        )
    try:
        saved = AlignedJudgeFile.model_validate_json(read_text(path))
    except ValidationError as e:
        if any(err["type"] == "json_invalid" for err in e.errors()):
            raise InputError([Problem(str(path), "not a JSON object: run `ragtrack judge align` again")]) from None
        raise InputError(problems_from_validation(str(path), e, None, noun="field", model=AlignedJudgeFile)) from None
    if digest_of(saved.prompts) != saved.digest:
        edited = Problem(str(path), "does not match its examples (edited?): run judge align again", field="digest")
        raise InputError([edited])
    if saved.llm != llm_identity:
        raise RagtrackError(
            f"{path} was aligned for {saved.llm}, but this judge is {llm_identity}: "
            f"run `ragtrack judge align --judge {judge}` for it"
        )
    for lang_map in saved.prompts.values():
        for language in lang_map:
            if language not in LANGUAGES:
                raise InputError([Problem(str(path), f"unknown language {language!r}", field="prompts")])
    return AlignedJudge(path, saved.digest, saved.prompts, saved)
