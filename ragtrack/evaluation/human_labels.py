"""Human labels of versions' answers, and the prediction-powered figures they give.

A label file (JSONL) holds, per line, a calibration case (:mod:`ragtrack.evaluation.calibration`:
question, contexts, GT answer, the answer, ``labels`` 1–5 per judge) that also names the
``version`` whose answer a person scored; its ``id`` is the golden item's. The answer itself is
in the line so that a label is used only for the answer it judged: a version evaluated again
that now answers the item differently has that label reported and left out.

With labels for a random subset of the items, the judge's mean (or the paired Δ of two
versions) is corrected by the judge's average error on the labelled items
(:func:`ragtrack.evaluation.ppi.ppi_mean`): an estimate of what a person would score, whose
interval is valid whatever the judge's bias. Pure: records and labels in, figures out.
"""

from __future__ import annotations

import hashlib
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from pydantic import Field

from ragtrack.errors import InputError, Problem
from ragtrack.evaluation.calibration import CalibrationCase, read_cases
from ragtrack.evaluation.judges import JUDGES
from ragtrack.evaluation.ppi import MIN_LABELLED, PPIEstimate, ppi_mean
from ragtrack.evaluation.stats import mean_interval
from ragtrack.records import ItemRecord

#: Where a project keeps them unless ``[project] human_labels`` or ``--human-labels`` says otherwise.
DEFAULT_PATH = "golden/labels/human-labels.jsonl"

#: The logged keys' prefixes (:meth:`PPIReport.metrics`): an eval run's mean, a comparison run's Δ.
MEAN, DELTA = "ppi", "ppi_delta"


class VersionLabel(CalibrationCase):
    """One person's scores of one version's answer to one golden item (``id``); pulled from a review
    queue (``ragtrack labels pull``), who scored it (MLflow's assessment source ID, kept in this file
    only, never in a param) and when (ISO 8601, UTC)."""

    version: str = Field(min_length=1)
    reviewer: str = ""
    labelled_at: str = ""


@dataclass(frozen=True)
class LabelFile:
    path: str
    labels: tuple[VersionLabel, ...]
    lines: tuple[int, ...]  # each label's line in the file
    digest: str  # of the file's bytes: the MLflow dataset's digest

    def versions(self) -> dict[str, int]:
        """Labelled answers per version."""
        return dict(Counter(label.version for label in self.labels))


def load_labels(path: str | Path) -> LabelFile:
    """A label file, every line checked (file, line and field of each problem); one version's answer
    to one item is labelled once (a second line would count that item twice)."""
    read = read_cases(path, VersionLabel, "human-label file")
    first: dict[tuple[str, str], int] = {}
    problems = []
    for n, label in read:
        if (seen := first.setdefault((label.version, label.id), n)) != n:
            again = f"{label.version}'s answer to {label.id} is labelled already on line {seen}"
            problems.append(Problem(str(path), again, n, "id"))
    if problems:
        raise InputError(problems)
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    return LabelFile(str(path), tuple(c for _, c in read), tuple(n for n, _ in read), digest)


def as_calibration_cases(file: LabelFile) -> list[CalibrationCase]:
    """A label file's lines as the cases ``judge align`` learns from: one per version's answer, its id
    ``<version>/<item>`` (two versions' answers to one item are two cases, never one split in two)."""
    own = set(VersionLabel.model_fields) - set(CalibrationCase.model_fields)
    return [
        CalibrationCase(**(label.model_dump(exclude=own) | {"id": f"{label.version}/{label.id}"}))
        for label in file.labels
    ]


def _same_answer(a: str, b: str) -> bool:
    return " ".join(a.split()) == " ".join(b.split())


@dataclass(frozen=True)
class Matched:
    """The labels of one version's run that label the answers it recorded (item ID → label), and the
    ones left out with why, each naming its line."""

    version: str
    labels: dict[str, VersionLabel]
    left_out: list[str] = field(default_factory=list)


def match(file: LabelFile, version: str, records: Sequence[ItemRecord]) -> Matched:
    """``version``'s labels that belong to ``records``: an item the run has, and the answer it gave."""
    by_id = {r.id: r for r in records}
    used, left_out, absent = {}, [], []
    for label, n in zip(file.labels, file.lines, strict=True):
        if label.version != version:
            continue
        record = by_id.get(label.id)
        if record is None:
            absent.append(f"{label.id} (line {n})")
        elif not _same_answer(record.answer, label.answer):
            left_out.append(
                f"{file.path}:{n}: {version}'s recorded answer to {label.id} is not the one labelled "
                "(the label is for another answer): left out"
            )
        else:
            used[label.id] = label
    if absent:  # one line: a --limit run leaves out many at once
        shown = ", ".join(absent[:6]) + (f" and {len(absent) - 6} more" if len(absent) > 6 else "")
        left_out.append(f"{file.path}: {len(absent)} label(s) of {version} name items its run does not have: {shown}")
    return Matched(version, used, left_out)


@dataclass(frozen=True)
class PPIFigure:
    """One judged metric: the judge-only figure over every item with its 95% interval, and the
    prediction-powered one (None, with ``reason``, when the labels cannot give it)."""

    metric: str
    judge: float
    judge_low: float
    judge_high: float
    items: int  # items the judge scored (on both sides, for a Δ)
    ppi: PPIEstimate | None = None
    reason: str = ""


def version_figures(
    records: Sequence[ItemRecord],
    matched: Matched,
    confidence: float = 0.95,
    clusters: Mapping[str, str] | None = None,
) -> list[PPIFigure]:
    """Each judged metric's mean for one version: the judge's alone (t interval over the items) and
    prediction-powered from the labelled items, clustered by ``clusters`` (item ID → label) if given."""
    figures = []
    for metric in judged_metrics(records):
        scored = [(r.id, s) for r in records if (s := _score(r, metric)) is not None]
        values = [s for _, s in scored]
        low, high = mean_interval(values, confidence)
        human = {i: lab.labels[metric] for i, lab in matched.labels.items() if metric in lab.labels}
        labelled = [(s, human[i]) for i, s in scored if i in human]
        unlabelled = [s for i, s in scored if i not in human]
        figure = PPIFigure(metric, statistics.fmean(values), low, high, len(values))
        lab_ids = [i for i, _ in scored if i in human]
        other_ids = [i for i, _ in scored if i not in human]
        where = _where(clusters, lab_ids, other_ids)
        figures.append(_with_ppi(figure, unlabelled, labelled, confidence, f"{matched.version}'s answers", where))
    return figures


def delta_figures(
    records_a: Sequence[ItemRecord],
    matched_a: Matched,
    records_b: Sequence[ItemRecord],
    matched_b: Matched,
    judge_intervals: dict[str, tuple[float, float, float]],
    confidence: float = 0.95,
    clusters: Mapping[str, str] | None = None,
) -> list[PPIFigure]:
    """Each judged metric's paired Δ (b − a): the judge-only one is ``judge_intervals`` (metric → Δ, low,
    high: the comparison's clustered bootstrap row), the prediction-powered one uses the items whose
    answers are labelled on both sides, per-item differences of judge and of labels."""
    by_id = {r.id: r for r in records_a}
    figures = []
    for metric in judged_metrics(records_b):
        if metric not in judge_intervals:
            continue
        diffs, labelled, ids, lab_ids = [], [], [], []
        for rb in records_b:
            ra = by_id.get(rb.id)
            if ra is None or (sa := _score(ra, metric)) is None or (sb := _score(rb, metric)) is None:
                continue
            la, lb = matched_a.labels.get(rb.id), matched_b.labels.get(rb.id)
            if la and lb and metric in la.labels and metric in lb.labels:
                labelled.append((sb - sa, lb.labels[metric] - la.labels[metric]))
                lab_ids.append(rb.id)
            else:
                diffs.append(sb - sa)
                ids.append(rb.id)
        delta, low, high = judge_intervals[metric]
        figure = PPIFigure(metric, delta, low, high, len(diffs) + len(labelled))
        both = f"both {matched_a.version}'s and {matched_b.version}'s answers"
        figures.append(_with_ppi(figure, diffs, labelled, confidence, both, _where(clusters, lab_ids, ids)))
    return figures


def _where(clusters: Mapping[str, str] | None, labelled: list[str], unlabelled: list[str]):
    """The labelled and the unlabelled items' cluster labels, or None for none."""
    if clusters is None:
        return None
    return [clusters[i] for i in labelled], [clusters[i] for i in unlabelled]


def _with_ppi(
    figure: PPIFigure,
    unlabelled: list[float],
    labelled: list[tuple[float, int]],
    confidence: float,
    whose: str,
    clusters: tuple[list[str], list[str]] | None = None,
) -> PPIFigure:
    if len(labelled) < MIN_LABELLED:
        got = "no item" if not labelled else f"{len(labelled)} item{'s' if len(labelled) > 1 else ''} only"
        return replace(figure, reason=f"{got} with {figure.metric} labels of {whose} (needs {MIN_LABELLED})")
    lab, other = clusters if clusters is not None else (None, None)
    estimate = ppi_mean(unlabelled, [f for f, _ in labelled], [y for _, y in labelled], confidence, other, lab)
    return replace(figure, ppi=estimate)


def judged_metrics(records: Sequence[ItemRecord]) -> list[str]:
    """The judge metrics some record carries a verdict of, in the registry's order."""
    present = {j for r in records for j in r.judges}
    return [j for j in JUDGES.names() if j in present]


def _score(record: ItemRecord, judge: str) -> float | None:
    verdict = record.judges.get(judge)
    return None if verdict is None or verdict.score is None else float(verdict.score)


def logged_means(metrics: dict[str, float]) -> list[tuple[str, float, float, float, float, int]]:
    """From an eval run's metrics (:meth:`PPIReport.metrics` with ``MEAN``), per judged metric that has
    one: name, judge-only mean, prediction-powered mean, its interval, items labelled."""
    k = metrics
    return [
        (j, k[j], k[f"{MEAN}/{j}"], k[f"{MEAN}_ci_low/{j}"], k[f"{MEAN}_ci_high/{j}"], int(k[f"{MEAN}_labelled/{j}"]))
        for j in JUDGES.names()
        if f"{MEAN}/{j}" in k and j in k
    ]


@dataclass(frozen=True)
class PPIReport:
    """What a label file gave one eval (one version) or one comparison (a paired Δ)."""

    file: LabelFile
    matched: tuple[Matched, ...]  # one per version, in the command's order
    figures: list[PPIFigure]

    @property
    def used(self) -> int:
        """Labels that entered the figures (of answers the runs recorded)."""
        return sum(len(m.labels) for m in self.matched)

    @property
    def left_out(self) -> list[str]:
        return [line for m in self.matched for line in m.left_out]

    def metrics(self, prefix: str) -> dict[str, float]:
        """``<prefix>/<metric>``, ``<prefix>_ci_low/…``, ``<prefix>_ci_high/…``, ``<prefix>_labelled/…``."""
        out: dict[str, float] = {}
        for f in self.figures:
            if f.ppi is not None:
                out |= {
                    f"{prefix}/{f.metric}": f.ppi.estimate,
                    f"{prefix}_ci_low/{f.metric}": f.ppi.ci_low,
                    f"{prefix}_ci_high/{f.metric}": f.ppi.ci_high,
                    f"{prefix}_labelled/{f.metric}": float(f.ppi.labelled),
                }
        return out

    def to_json(self) -> dict:
        """For a script (``--json``, ``comparison.json``): the file, the labels used and left out, per metric."""
        return {
            "labels": self.file.path,
            "digest": self.file.digest,
            "labelled": {matched.version: len(matched.labels) for matched in self.matched},
            "left_out": self.left_out,
            "metrics": [
                {
                    "metric": f.metric,
                    "judge": f.judge,
                    # No interval where the judge's figure did not vary (never a zero-width one).
                    "judge_ci_low": f.judge_low if f.judge_high > f.judge_low else None,
                    "judge_ci_high": f.judge_high if f.judge_high > f.judge_low else None,
                    "items": f.items,
                    "ppi": None if f.ppi is None else f.ppi.estimate,
                    "ci_low": None if f.ppi is None else f.ppi.ci_low,
                    "ci_high": None if f.ppi is None else f.ppi.ci_high,
                    "labelled": 0 if f.ppi is None else f.ppi.labelled,
                    "lam": None if f.ppi is None else f.ppi.lam,
                    "labels_only_ci": None if f.ppi is None else list(f.ppi.labels_only),
                    "reason": f.reason or None,
                }
                for f in self.figures
            ],
        }
