"""Score the traffic pulled since the last run: one MLflow run per app version and day, and an alarm.

    from ragtrack.api import monitor
    report = monitor(sample_rate=0.2)
    for drop in report.alarms:
        print(drop)            # exit 1 from the CLI: cron or CI can alert

Every window (app version × day) of the pulled messages is worked out; those
whose messages changed since their run was logged (a new day, a later pull, a
re-rating) are judged — groundedness and relevance on a sample, verdicts
written on the production traces as they come — and logged again. Windows
already logged with the same messages and judge are left alone, so a second
monitor in a row judges nothing. The figures and the drop rule are
:mod:`ragtrack.production.monitor`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ragtrack.api.triage import judging_cost, narrowed, read_production
from ragtrack.config import load_config
from ragtrack.engines import JudgeSource, MessageWork, make_engine
from ragtrack.errors import RagtrackError
from ragtrack.production.judging import Judging, reference_free_panel
from ragtrack.production.monitor import Comparison, Cost, Drop, Window, compare_all, windows
from ragtrack.production.signals import in_sample, judges_for, sample_point
from ragtrack.text import language_of


@dataclass
class WindowResult:
    window: Window
    comparison: Comparison
    status: str  # new | updated | unchanged
    run_id: str | None


@dataclass
class MonitorReport:
    results: list[WindowResult]  # every window in scope, by app then day
    judging: Judging | None  # None: nothing needed judging
    sample_rate: float
    experiment: str  # the monitor experiment
    cut: int = 0  # sampled messages left unjudged to stay within max_calls
    dry_run: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def alarms(self) -> list[Drop]:
        """Drops of the windows this run logged (a window logged before alarmed then)."""
        return [d for r in self.results if r.status != "unchanged" for d in r.comparison.drops]


def monitor(
    *,
    root: str | Path = ".",
    tracking_uri: str | None = None,
    source: str | None = None,
    app: str | None = None,
    since: str | None = None,
    until: str | None = None,
    judge: str = "offline",
    sample_rate: float | None = None,
    max_calls: int | None = None,
    dry_run: bool = False,
    use_cache: bool = True,
    engine: str = "local",
    master: str | None = None,
    on_cost: Callable[[Cost], None] = lambda cost: None,
    progress: Callable[[str], None] = lambda line: None,
) -> MonitorReport:
    """Judge, log and compare the windows whose messages changed since the last run (see the module).

    ``sample_rate``, ``max_calls`` and the drop thresholds default to ``[monitor]`` of ragtrack.toml.
    ``dry_run``: work out the windows and what judging would cost, write nothing. ``on_cost`` hears the
    cost before the first judge call. ``engine`` judges here (``local``) or on Spark (``spark``, on
    ``master``, default ``[spark] master``): the same verdicts, written here as they come.
    """
    from ragtrack.tracking.monitoring import MonitorRuns, Verdicts

    config = load_config(root)
    judging_engine = make_engine(engine, config, master)  # an unknown engine fails before any work
    settings = config.monitor
    rate = settings.sample_rate if sample_rate is None else sample_rate
    budget = settings.max_calls if max_calls is None else max_calls
    if not 0 <= rate <= 1:
        raise RagtrackError(f"--sample-rate must be between 0 and 1, not {rate}")
    messages, experiment, store = read_production(
        config, tracking_uri, writing=not dry_run, quiet_ok=True, source=source, app=app, since=since, until=until
    )
    if not messages:  # a quiet day is an answer, not a failure: cron must not read a configuration error
        where = narrowed({"source": source, "app": app, "since": since, "until": until})
        report = MonitorReport([], None, rate, f"{experiment}-monitor", 0, dry_run)
        report.notes.append(f"no messages in {experiment}{where}: a quiet period, nothing to score")
        return report
    verdicts, runs = Verdicts(store), MonitorRuns(store)
    language = language_of("".join(m.question for m in messages[:200]))
    panel, llm = reference_free_panel(judge, config, language, use_cache)
    held = verdicts.read(panel.identity)  # trace → judge → score, from earlier runs of this judge
    by_trace = {m.trace_id: m.message_id for m in messages}
    scores = {by_trace[t]: {j: s for j, s in v.items() if s is not None} for t, v in held.items() if t in by_trace}
    logged = runs.existing(panel.identity)
    stale = {
        (w.app, w.day)
        for w in windows(messages, scores)
        if (w.app, w.day) not in logged or logged[(w.app, w.day)].digest != w.digest
    }
    todo = sorted(
        (
            m
            for m in messages
            if (m.app, m.created_at[:10]) in stale
            and in_sample(m, rate)
            and any(j not in held.get(m.trace_id, {}) for j in judges_for(m))
        ),
        key=sample_point,
    )
    cut, calls, kept = 0, 0, []
    for m in todo:  # in sample order, so a larger budget judges a superset
        need = len(judges_for(m))
        if calls + need > budget:
            cut = len(todo) - len(kept)
            break
        calls += need
        kept.append(m)
    cost = judging_cost(kept, panel, llm)
    on_cost(cost)
    report = MonitorReport([], None, rate, f"{store.experiment_name}-monitor", cut, dry_run)
    if cut:
        report.notes.append(
            f"{cut} sampled message(s) left unjudged to stay within max_calls = {budget} "
            "(raise it, or lower --sample-rate)"
        )
    if not dry_run and kept:

        def write(chunk, chunk_verdicts) -> None:
            for m in chunk:
                for j, v in chunk_verdicts[m.message_id].items():
                    verdicts.write(m.trace_id, j, v, panel.label, panel.identity)
                    if v.score is not None:
                        scores.setdefault(m.message_id, {})[j] = v.score

        source = JudgeSource(str(Path(config.root).resolve()), judge, use_cache)
        report.judging = judging_engine.judge_messages(MessageWork(kept, panel, cost, source, write, progress))
        if report.judging.stopped:
            report.notes.append(f"judging stopped early, what was judged is kept: {report.judging.stopped}")
    all_windows = windows(messages, scores)
    comparisons = {(c.app, c.day): c for c in compare_all(all_windows, settings.max_drop, settings.min_messages)}
    for w in all_windows:
        key = (w.app, w.day)
        before = logged.get(key)
        status = "unchanged" if key not in stale else "updated" if before else "new"
        run_id = before.run_id if before else None
        if status != "unchanged" and not dry_run:
            run_id = runs.log(
                w,
                comparisons[key],
                judge_label=panel.label,
                identity=panel.identity,
                sample_rate=rate,
                run_id=run_id,
            )
            progress(f"logged {w.app} {w.day}")
        report.results.append(WindowResult(w, comparisons[key], status, run_id))
    if not stale:
        report.notes.append("nothing new since the last run: every window is logged with the same messages")
    return report
