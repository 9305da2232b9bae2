"""The monitor's writes: judge verdicts on production traces, and one run per app version and day.

* A reference-free judge's verdict on a production message is a feedback
  assessment ``judge/<judge>`` (1–5, the reason as rationale) on the message's
  trace, from the judge's identity (CODE for the heuristics, LLM_JUDGE for a
  model) — the names eval traces use, so the UI reads both alike. A failed
  verdict is an assessment with its error. Verdicts already on a trace from the
  same judge identity are read back instead of asked again: an interrupted
  monitor resumes.
* A window (app version × day) is one run in ``<experiment>-monitor`` per judge
  identity, named ``<app> <day>``, tagged with both and with the digest of its
  messages; a later
  monitor whose window holds the same messages leaves the run alone, one whose
  window grew (a later pull) logs the new figures into the same run.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlflow
from mlflow.entities import AssessmentError, AssessmentSource, AssessmentSourceType

from ragtrack.evaluation.judges import HEURISTIC
from ragtrack.production.monitor import Comparison, Window, node_summary
from ragtrack.production.signals import REFERENCE_FREE
from ragtrack.records import JudgeRecord
from ragtrack.tracking.production import ProductionLog
from ragtrack.tracking.store import Store, Tag, quoted
from ragtrack.tracking.traces import judge_feedback

MONITOR = "monitor"
KIND = "monitor"


def _source(judge_label: str, identity: str) -> AssessmentSource:
    kind = AssessmentSourceType.CODE if judge_label == HEURISTIC else AssessmentSourceType.LLM_JUDGE
    return AssessmentSource(kind, identity)


class Verdicts:
    """Reference-free judge verdicts on the production traces of one store."""

    def __init__(self, store: Store):
        self.log = ProductionLog(store)

    def read(self, identity: str) -> dict[str, dict[str, int | None]]:
        """Trace ID → judge → score (None: the verdict failed) of every verdict ``identity`` gave."""
        names = {judge_feedback(j): j for j in REFERENCE_FREE}
        out: dict[str, dict[str, int | None]] = {}
        for info in self.log.trace_infos():
            for a in info.assessments or ():
                if a.name in names and a.valid is not False and a.source and a.source.source_id == identity:
                    value = getattr(a, "value", None)
                    out.setdefault(info.trace_id, {})[names[a.name]] = int(value) if value is not None else None
        return out

    def write(self, trace_id: str, judge: str, verdict: JudgeRecord, judge_label: str, identity: str) -> None:
        error = (
            AssessmentError(error_code="JUDGE_ERROR", error_message=verdict.error) if verdict.score is None else None
        )
        mlflow.log_feedback(
            trace_id=trace_id,
            name=judge_feedback(judge),
            value=verdict.score,
            error=error,
            rationale=verdict.reason or None,
            source=_source(judge_label, identity),
        )


@dataclass(frozen=True)
class WindowRun:
    run_id: str
    digest: str
    judge_identity: str


class MonitorRuns:
    """The ``<experiment>-monitor`` experiment: one run per (app, day)."""

    def __init__(self, store: Store):
        self.store = store
        self.experiment_id = store.side_experiment(MONITOR)

    def existing(self, identity: str) -> dict[tuple[str, str], WindowRun]:
        """(app, day) → the window's run judged by ``identity`` (another judge's runs are other runs)."""
        query = f"tags.`{Tag.KIND}` = {quoted(KIND)} and tags.`{Tag.JUDGE_IDENTITY}` = {quoted(identity)}"
        found = {}
        for run in self.store.search_runs([self.experiment_id], query):
            tags = run.data.tags
            key = (tags.get(Tag.MONITOR_APP, ""), tags.get(Tag.MONITOR_DAY, ""))
            found[key] = WindowRun(run.info.run_id, tags.get(Tag.MONITOR_DIGEST, ""), identity)
        return found

    def log(
        self,
        window: Window,
        comparison: Comparison,
        *,
        judge_label: str,
        identity: str,
        sample_rate: float,
        run_id: str | None,
    ) -> str:
        """Create the window's run (or update ``run_id``) with its figures; returns the run ID."""
        tags = {
            Tag.KIND: KIND,
            Tag.MONITOR_APP: window.app,
            Tag.MONITOR_DAY: window.day,
            Tag.MONITOR_DIGEST: window.digest,
            Tag.JUDGE_IDENTITY: identity,
            Tag.PRODUCTION_COVERAGE: ",".join(sorted(window.coverage)),
            Tag.MONITOR_ALARM: str(bool(comparison.drops)).lower(),
        }
        params = {"judge": judge_label, "sample_rate": f"{sample_rate:g}", "app": window.app, "day": window.day}
        if run_id is None:
            run_id = self.store.start_run(f"{window.app} {window.day}", params, tags, experiment_id=self.experiment_id)
        else:
            self.store.tag_run(run_id, tags)
        self.store.log_metrics(run_id, window.metrics() | comparison.metrics())
        self.store.describe_run(run_id, describe(window, comparison))
        self.store.finish_run(run_id)
        return run_id


def describe(window: Window, comparison: Comparison) -> str:
    """The run's Markdown: the rates with their intervals, and the comparison with the day before."""
    lines = [f"**{window.app}**, {window.day} (UTC): {window.messages} messages", ""]
    if window.partial:
        lines += [
            "Only the conversations of end users who left feedback could be read (Dify's service API): "
            "these rates are over those conversations, not over the app's traffic.",
            "",
        ]
    lines += ["| metric | value | 95 % interval | n |", "|---|---|---|---|"]
    for name, e in window.rates.items():
        lines.append(f"| {name} | {e.value:.3f} | {e.low:.3f} – {e.high:.3f} | {e.n} |")
    lines.append("")
    if nodes := node_summary(window, comparison):
        lines += ["**Nodes**", "", *[f"- {line}" for line in nodes], ""]
    if comparison.skipped:
        lines.append(f"Not compared with an earlier day: {comparison.skipped}.")
    elif comparison.drops:
        lines += [f"**Alarm** against {comparison.previous_day}:", ""] + [f"- {d}" for d in comparison.drops]
    else:
        lines.append(f"No drop against {comparison.previous_day}.")
    return "\n".join(lines)
