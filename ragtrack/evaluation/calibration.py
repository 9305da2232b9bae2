"""How far can a judge be trusted? Agreement with hand-assigned labels.

The calibration set (``golden/calibration/calibration.jsonl``) holds cases with
a question, contexts, a GT answer, a candidate answer and the score a careful
human gives it on each rubric. Running a judge over it gives, per judge:

* exact agreement — share of cases scored exactly as labelled;
* within-one agreement — share off by at most one point;
* Spearman's rank correlation with the labels (does the judge *order* answers
  the way a human would, whatever its offset?);
* how many cases it could not score at all (judge errors).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ragtrack.errors import InputError, Problem, problems_from_validation
from ragtrack.evaluation.judges import JUDGES, JudgeInput
from ragtrack.files import read_jsonl

Score = Literal[1, 2, 3, 4, 5]


class CalibrationCase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    lang: Literal["en", "zh"]
    question: str
    contexts: tuple[str, ...]
    gt_answer: str
    answer: str
    labels: dict[str, Score] = Field(min_length=1)
    trap: str = "none"
    note: str = ""

    @field_validator("labels")
    @classmethod
    def _known_judges(cls, labels: dict[str, int]) -> dict[str, int]:
        for judge in labels:
            JUDGES.check(judge)
        return labels

    def judge_input(self) -> JudgeInput:
        return JudgeInput(self.question, self.answer, self.gt_answer, self.contexts)


C = TypeVar("C", bound=CalibrationCase)


def load_cases(path: str | Path) -> list[CalibrationCase]:
    """The calibration set, refused when it would measure nothing honestly: no case at all (an
    agreement over n = 0), a case twice (counted twice), or one case labelled two ways (an ID, or the
    same question and answer, on two lines with other labels: which label is right?)."""
    read = read_cases(path, CalibrationCase, "calibration set")
    if not read:
        raise InputError([Problem(str(path), "holds no cases: a calibration needs hand-labelled cases")])
    problems: list[Problem] = []
    by_id: dict[str, tuple[int, CalibrationCase]] = {}
    by_text: dict[tuple, tuple[int, CalibrationCase]] = {}
    for line, case in read:
        text = (case.lang, case.question, case.contexts, case.gt_answer, case.answer)
        earlier = by_id.get(case.id) or by_text.get(text)
        if earlier is None:
            by_id[case.id], by_text[text] = (line, case), (line, case)
            continue
        first_line, first = earlier
        same = "the same ID" if first.id == case.id else f"the same question and answer as {first.id!r}"
        if first.labels == case.labels:
            problems.append(Problem(str(path), f"a duplicate of line {first_line} ({same}): remove one", line, "id"))
        else:
            problems.append(
                Problem(
                    str(path),
                    f"conflicts with line {first_line} ({same}, labels {_labels(first)} there, {_labels(case)} "
                    "here): keep the right one",
                    line,
                    "labels",
                )
            )
    if problems:
        raise InputError(problems)
    return [case for _, case in read]


def _labels(case: CalibrationCase) -> str:
    return ", ".join(f"{judge} {score}" for judge, score in sorted(case.labels.items()))


def read_cases(path: str | Path, model: type[C], what: str) -> list[tuple[int, C]]:
    """Every line of a JSONL file of ``model`` cases, with its line number; every bad line is an
    :class:`InputError` problem naming file, line and field (``what`` names the file when it is missing)."""
    path = Path(path)
    if not path.is_file():
        raise InputError([Problem(str(path), f"{what} not found")])
    lines, problems = read_jsonl(path)
    cases = []
    for n, row in lines:
        try:
            cases.append((n, model.model_validate(row)))
        except ValidationError as e:
            problems += problems_from_validation(str(path), e, n, noun="field", model=model)
    if problems:
        raise InputError(problems)
    return cases


@dataclass(frozen=True)
class Agreement:
    judge: str
    n: int  # cases scored (labels present, judge produced a score)
    errors: int  # cases the judge could not score
    exact: float
    within_one: float
    spearman: float | None  # None when undefined (fewer than 2 cases, or a constant side)

    def as_metrics(self, suffix: str = "") -> dict[str, float]:
        out = {
            f"exact/{self.judge}{suffix}": self.exact,
            f"within_one/{self.judge}{suffix}": self.within_one,
            f"n/{self.judge}{suffix}": float(self.n),
            f"errors/{self.judge}{suffix}": float(self.errors),
        }
        if self.spearman is not None:
            out[f"spearman/{self.judge}{suffix}"] = self.spearman
        return out


def agreement(judge: str, labels: list[int], predicted: list[int | None]) -> Agreement:
    """Agreement of ``predicted`` scores (None = judge error) with ``labels``."""
    pairs = [(y, p) for y, p in zip(labels, predicted, strict=True) if p is not None]
    errors = len(labels) - len(pairs)
    if not pairs:
        return Agreement(judge, 0, errors, 0.0, 0.0, None)
    exact = sum(y == p for y, p in pairs) / len(pairs)
    within = sum(abs(y - p) <= 1 for y, p in pairs) / len(pairs)
    ys, ps = [y for y, _ in pairs], [p for _, p in pairs]
    rho = None  # undefined when either side is constant (e.g. a judge that always says 5)
    if len(set(ys)) > 1 and len(set(ps)) > 1:
        from scipy.stats import spearmanr  # imported here: only calibration needs scipy

        value = spearmanr(ys, ps).statistic
        rho = None if math.isnan(value) else float(value)
    return Agreement(judge, len(pairs), errors, exact, within, rho)


def summarize(cases: list[CalibrationCase], predicted: dict[str, list[int | None]]) -> list[Agreement]:
    """Per judge, over the cases that carry a label for it (in ``cases`` order)."""
    out = []
    for judge in JUDGES.names():
        if judge not in predicted:
            continue
        rows = [(c.labels[judge], p) for c, p in zip(cases, predicted[judge], strict=True) if judge in c.labels]
        out.append(agreement(judge, [y for y, _ in rows], [p for _, p in rows]))
    return out
