"""The Python API: what the CLI calls, and what users can import.

from ragtrack.api import evaluate
report = evaluate("v5")
print(report.metrics["correctness"], report.run_id)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ragtrack.agent import Agent, AgentContext, build_agent
from ragtrack.config import ProjectConfig, load_config
from ragtrack.corpus import Corpus, load_corpus
from ragtrack.errors import RagtrackError
from ragtrack.evaluation.aggregate import aggregate
from ragtrack.evaluation.calibration import Agreement, CalibrationCase, load_cases, summarize
from ragtrack.evaluation.compare import ItemChange, MetricRow, comparability_problems, compare_records
from ragtrack.evaluation.diagnosis import Finding, diagnose, render
from ragtrack.evaluation.judges import JUDGES, JudgePanel, prompt_hash
from ragtrack.evaluation.promotion import Decision, Rule
from ragtrack.evaluation.runner import Checkpoint, EvalOutcome, run_items
from ragtrack.files import atomic_write_text, read_text
from ragtrack.golden import GoldenSet, load_golden
from ragtrack.llm import make_llm
from ragtrack.llm.accounting import Accounting, Usage
from ragtrack.records import ItemRecord, RunSummary
from ragtrack.spec import LoadedSpec, load_spec
from ragtrack.tracking import runs
from ragtrack.tracking.compare import log_comparison
from ragtrack.tracking.models import ModelRef, ensure_version_model
from ragtrack.tracking.promotion import promote as promote_in_store
from ragtrack.tracking.store import Store, Tag, open_store


@dataclass
class EvalReport:
    version: str
    run_id: str
    tracking_uri: str
    model_version: str
    metrics: dict[str, float]
    records: list[ItemRecord]
    accounting: dict[str, dict[str, dict[str, float]]]  # "agent"/"judge" → step → figures
    findings: list[Finding]
    params: dict[str, str]
    resumed: int = 0
    stopped_early: str | None = None
    setup: str = ""  # what getting the agent ready did: "index from cache", "index built"

    @property
    def complete(self) -> bool:
        return self.stopped_early is None


@dataclass
class Progress:
    """Callbacks the CLI uses to draw its progress bar (all optional)."""

    on_stage: Callable[[str], None] = lambda stage: None
    on_start: Callable[[int, int], None] = lambda total, resumed: None
    on_item: Callable[[ItemRecord], None] = lambda record: None


def load_inputs(config: ProjectConfig, corpus_path: str | None, golden_path: str | None) -> tuple[Corpus, GoldenSet]:
    corpus = load_corpus(corpus_path or config.path(config.project.corpus))
    golden = load_golden(golden_path or config.path(config.project.golden), corpus)
    return corpus, golden


@dataclass
class EvalSession:
    """Everything an eval needs before its first item: inputs, agent, judges, the open run."""

    spec: LoadedSpec
    corpus: Corpus
    golden: GoldenSet
    agent: Agent
    panel: JudgePanel
    store: Store
    model: ModelRef
    checkpoint: Checkpoint
    run_id: str
    params: dict[str, str]
    done: dict[str, ItemRecord] = field(default_factory=dict)  # items finished by an earlier process
    build_usage: dict[str, Usage] = field(default_factory=dict)  # index-time LLM work, every process


@dataclass(frozen=True)
class EvalOptions:
    """How to run an eval (every field is an ``evaluate`` keyword, with the same meaning)."""

    root: str | Path = "."
    golden_path: str | None = None
    corpus_path: str | None = None
    limit: int | None = None
    llm: str | None = None
    judge: str | None = None
    judge_language: str | None = None
    tracking_uri: str | None = None
    use_cache: bool = True
    fresh: bool = False


def evaluate(
    version: str,
    *,
    root: str | Path = ".",
    golden_path: str | None = None,
    corpus_path: str | None = None,
    limit: int | None = None,
    llm: str | None = None,
    judge: str | None = None,
    judge_language: str | None = None,
    tracking_uri: str | None = None,
    use_cache: bool = True,
    fresh: bool = False,
    progress: Progress | None = None,
) -> EvalReport:
    """Answer every golden item with ``version``, score it and log an MLflow run.

    ``llm`` replaces the LLM of a pipeline's steps, ``judge`` the judges' (both:
    ``offline``, ``openai:<model>``, ``local:<path>`` or a profile); ``limit``
    takes the first N items (a different golden digest). An interrupted eval
    resumes from its checkpoint when started again with the same inputs
    (``fresh=True`` starts over).
    """
    progress = progress or Progress()
    options = EvalOptions(
        root, golden_path, corpus_path, limit, llm, judge, judge_language, tracking_uri, use_cache, fresh
    )
    session = prepare_eval(version, options, progress)
    outcome = run_eval(session, progress)
    progress.on_stage("logging to MLflow")
    return finish_eval(session, outcome)


def prepare_eval(version: str, options: EvalOptions, progress: Progress | None = None) -> EvalSession:
    """Load the inputs, open the store, build the agent and the judges, and start (or reopen) the run."""
    o, progress = options, progress or Progress()
    config = load_config(o.root)
    spec = load_spec(version, config.path(config.project.pipelines), config.root)
    if o.llm is not None:
        if spec.kind != "pipeline":
            raise RagtrackError(f"--llm sets the LLM of a ragtrack pipeline; {spec.name} is a {spec.kind} agent")
        spec = spec.with_values({"llm": {"model": o.llm}})
    progress.on_stage("loading corpus and golden set")
    corpus, golden = load_inputs(config, o.corpus_path, o.golden_path)
    golden = golden.limit(o.limit)
    store = open_store(config, o.tracking_uri)
    min_overlap = config.eval.min_overlap
    language = o.judge_language or golden.language
    judge_llm = make_llm(o.judge or config.eval.judge, config, use_cache=o.use_cache)
    panel = JudgePanel.create(judge_llm, language, config.eval.judge_max_tokens)

    progress.on_stage(f"building {spec.name} (index, models)")
    agent = build_agent(spec, AgentContext(corpus, config, min_overlap, o.use_cache))
    model = ensure_version_model(store, spec, str(corpus.source), str(Path(o.root).resolve()))

    key = hashlib.sha256(
        "|".join([spec.hash, golden.digest, panel.identity, str(min_overlap), language]).encode()
    ).hexdigest()[:16]
    checkpoint = Checkpoint(config.cache_dir.parent / "checkpoints" / f"{spec.name}-{key}.jsonl")
    if o.fresh:
        checkpoint.remove()
    header, done, build_usage = checkpoint.load()
    params = runs.eval_params(spec, corpus, golden, panel, agent, model, min_overlap)
    tags = runs.eval_tags(spec, golden, panel, agent, model)
    run_id = store.start_run(f"eval {spec.name}", params, tags, run_id=header.get("run_id"))
    checkpoint.start({"run_id": run_id, "version": spec.name})
    checkpoint.add_build(agent.setup.usage)
    for step, usage in agent.setup.usage.items():
        build_usage.setdefault(step, Usage()).add(usage)
    return EvalSession(spec, corpus, golden, agent, panel, store, model, checkpoint, run_id, params, done, build_usage)


def run_eval(session: EvalSession, progress: Progress | None = None) -> EvalOutcome:
    """Answer and score every item not finished yet; the run is ended as KILLED if this raises."""
    progress = progress or Progress()
    golden = session.golden
    progress.on_start(len(golden), len([i for i in golden.items if i.id in session.done]))
    try:
        return run_items(
            golden,
            session.agent,
            session.panel,
            done=session.done,
            checkpoint=session.checkpoint,
            on_item=progress.on_item,
        )
    except BaseException:
        session.store.finish_run(session.run_id, complete=False)
        raise


def finish_eval(session: EvalSession, outcome: EvalOutcome) -> EvalReport:
    """Aggregate, diagnose and log the run; the checkpoint goes once the run is complete."""
    records = outcome.records
    metrics = aggregate(records)
    accounting = {
        "agent": Accounting.of([session.build_usage, *(r.usage.get("agent", {}) for r in records)]).summary(),
        "judge": Accounting.of(r.usage.get("judge", {}) for r in records).summary(),
    }
    for who, steps_summary in accounting.items():
        for step, figures in steps_summary.items():
            for name, value in figures.items():
                metrics[f"llm/{who}/{step}/{name}"] = value
    metrics["llm/peak_in_flight"] = max(session.panel.llm.limiter.peak_in_flight, session.agent.peak_in_flight)

    findings = diagnose(metrics, records)
    runs.record_eval(
        session.store, session.run_id, session.model.model_id, records, metrics, render(findings), accounting
    )
    complete = outcome.stopped_early is None and len(records) == len(session.golden)
    session.store.finish_run(session.run_id, complete)
    if complete:
        session.checkpoint.remove()
    return EvalReport(
        version=session.spec.name,
        run_id=session.run_id,
        tracking_uri=session.store.tracking_uri,
        model_version=session.model.version,
        metrics=metrics,
        records=records,
        accounting=accounting,
        findings=findings,
        params=session.params,
        resumed=outcome.resumed,
        stopped_early=outcome.stopped_early,
        setup=session.agent.setup.summary,
    )


# ---------------------------------------------------------------- compare / promote / versions


@dataclass
class ComparisonReport:
    a: RunSummary
    b: RunSummary
    rows: list[MetricRow]
    changes: list[ItemChange]
    run_id: str
    warnings: list[str]


def compare(
    version_a: str,
    version_b: str,
    *,
    root: str | Path = ".",
    golden_path: str | None = None,
    tracking_uri: str | None = None,
    allow_incomparable: bool = False,
    log: bool = True,
) -> ComparisonReport:
    """The latest comparable eval runs of two versions, side by side with paired statistics.

    B's latest complete run picks the golden digest and judge (or ``golden_path``
    does); A's latest run with the same ones is its partner.
    """
    from ragtrack.report import comparison_text

    config = load_config(root)
    store = open_store(config, tracking_uri)
    digest = load_inputs(config, None, golden_path)[1].digest if golden_path else None
    b = store.latest_eval(version_b, digest)
    try:
        a = store.latest_eval(version_a, b.golden_digest, b.judge_identity)
    except RagtrackError:
        if not allow_incomparable:
            raise RagtrackError(
                f"{version_a} has no eval on the golden set and judge of {version_b}'s latest run "
                f"(digest {b.golden_digest}, judge {b.judge_identity}); run: ragtrack eval --version {version_a} "
                f"with the same --golden and --judge"
            ) from None
        a = store.latest_eval(version_a)
    warnings = comparability_problems(a, b)
    if a.substituted or b.substituted:
        warnings.append("substituted models in " + ", ".join(r.version for r in (a, b) if r.substituted))
    rows, changes = compare_records(store.records(a.run_id), store.records(b.run_id))
    if any(r.partial for r in rows if r.scope == "all"):
        warnings.append("some judge means cover fewer than all items (judge errors): see n")
    run_id = log_comparison(store, a, b, rows, changes, comparison_text(a, b, rows, changes)) if log else ""
    return ComparisonReport(a, b, rows, changes, run_id, warnings)


def promote(
    version: str,
    *,
    root: str | Path = ".",
    tracking_uri: str | None = None,
    margin: float = 0.0,
    tolerance: float = 0.0,
    require_significance: bool = False,
    allow_substitutes: bool = False,
    allow_partial: bool = False,
    dry_run: bool = False,
) -> Decision:
    """Apply the promotion rule to ``version``'s latest eval; moves the ``champion`` alias on success."""
    config = load_config(root)
    store = open_store(config, tracking_uri)
    rule = Rule(margin, tolerance, require_significance, allow_substitutes, allow_partial, dict(config.gates))
    return promote_in_store(store, version, rule, dry_run=dry_run, lock_dir=config.cache_dir)


@dataclass(frozen=True)
class VersionRow:
    version: str
    model_version: str
    spec_hash: str
    champion: bool
    last_evals: list[RunSummary]  # newest per golden digest


def versions(*, root: str | Path = ".", tracking_uri: str | None = None) -> list[VersionRow]:
    """Every registered version (newest model version each), its last eval per golden digest."""
    config = load_config(root)
    store = open_store(config, tracking_uri)
    champion = store.champion()
    newest: dict[str, object] = {}
    for mv in store.model_versions():  # newest first
        newest.setdefault(mv.tags.get(Tag.VERSION, "?"), mv)
    evals = store.eval_runs()
    rows = []
    for name in sorted(newest):
        mv = newest[name]
        per_digest: dict[str, RunSummary] = {}
        for run in evals:
            if run.version == name:
                per_digest.setdefault(run.golden_digest, run)
        rows.append(
            VersionRow(
                name,
                str(mv.version),
                mv.tags.get(Tag.SPEC_HASH, ""),
                bool(champion and champion[0] == str(mv.version)),
                list(per_digest.values()),
            )
        )
    return rows


# ---------------------------------------------------------------- judge calibration


@dataclass
class CalibrationReport:
    judge: str
    judge_identity: str
    agreements: dict[str, list[Agreement]]  # "all" / "en" / "zh" → per judge
    predictions: dict[str, list[int | None]]
    run_id: str


def calibrate(
    judge: str = "offline",
    *,
    root: str | Path = ".",
    cases_path: str | None = None,
    tracking_uri: str | None = None,
    use_cache: bool = True,
    limit: int | None = None,
    on_start: Callable[[int], None] = lambda total: None,
    on_case: Callable[[], None] = lambda: None,
) -> CalibrationReport:
    """Run ``judge`` over the calibration set and measure its agreement with the labels.

    Each case is judged with the prompts of its own language; results are logged
    as a run in ``<experiment>-judges``.
    """
    config = load_config(root)
    cases = load_cases(cases_path or config.path("golden/calibration/calibration.jsonl"))[:limit]
    store = open_store(config, tracking_uri)
    llm = make_llm(judge, config, use_cache=use_cache)
    panels = {lang: JudgePanel.create(llm, lang, config.eval.judge_max_tokens) for lang in ("en", "zh")}
    predictions: dict[str, list[int | None]] = {j: [] for j in JUDGES}
    on_start(len(cases))

    def judge_case(case: CalibrationCase) -> dict[str, int | None]:
        verdicts, _ = panels[case.lang].judge(case.judge_input(), only=tuple(case.labels))
        return {name: v.score for name, v in verdicts.items()}

    with ThreadPoolExecutor(max_workers=llm.workers) as pool:
        for scores in pool.map(judge_case, cases):  # in case order
            for name in JUDGES:
                predictions[name].append(scores.get(name))
            on_case()
    by_scope = {"all": summarize(cases, predictions)}
    for lang in ("en", "zh"):
        idx = [i for i, c in enumerate(cases) if c.lang == lang]
        if idx:
            by_scope[lang] = summarize(
                [cases[i] for i in idx], {j: [p[i] for i in idx] for j, p in predictions.items()}
            )
    identity = panels["en"].identity + "+zh=" + prompt_hash(panels["zh"].steps)

    run_id = store.start_run(
        f"calibrate {judge}",
        {"judge": panels["en"].label, "judge_identity": identity, "cases": str(len(cases))},
        {Tag.KIND: "calibration", Tag.JUDGE_IDENTITY: identity},
        experiment_id=store.side_experiment("judges"),
    )
    metrics: dict[str, float] = {}
    for scope, agreements in by_scope.items():
        for a in agreements:
            metrics.update(a.as_metrics("" if scope == "all" else f"/{scope}"))
    store.log_metrics(run_id, metrics)
    store.log_json(
        run_id,
        "calibration.json",
        {
            "cases": [c.id for c in cases],
            "predictions": predictions,
            "labels": {j: [c.labels.get(j) for c in cases] for j in JUDGES},
        },
    )
    store.finish_run(run_id, complete=True)
    return CalibrationReport(judge, identity, by_scope, predictions, run_id)


# ---------------------------------------------------------------- golden set maintenance


def validate_golden(
    *, root: str | Path = ".", corpus_path: str | None = None, golden_path: str | None = None
) -> tuple[Corpus, GoldenSet]:
    """The corpus and the golden set, validated against each other (every problem with file, line, field)."""
    return load_inputs(load_config(root), corpus_path, golden_path)


def golden_stats(*, root: str | Path = ".", corpus_path: str | None = None, golden_path: str | None = None) -> dict:
    """Items per type, GT sizes, documents covered."""
    from ragtrack.golden import golden_stats as stats

    corpus, golden = validate_golden(root=root, corpus_path=corpus_path, golden_path=golden_path)
    return stats(golden, corpus)


def retirement_candidates(
    version_names: list[str], *, root: str | Path = ".", golden_path: str | None = None, tracking_uri: str | None = None
) -> list[str]:
    """Items with full marks (correctness 5, context recall 1) in the latest eval of every listed version.

    The golden set is an error notebook: items every recent version gets right
    only dilute the means; they belong in a regression set.
    """
    config = load_config(root)
    _, golden = load_inputs(config, None, golden_path)
    store = open_store(config, tracking_uri)
    perfect: set[str] | None = None
    for name in version_names:
        records = store.records(store.latest_eval(name, golden.digest).run_id)
        full = {
            r.id
            for r in records
            if r.retrieval["context_recall"] == 1.0
            and r.judges.get("correctness")
            and r.judges["correctness"].score == 5
        }
        perfect = full if perfect is None else perfect & full
    return [i.id for i in golden.items if i.id in (perfect or set())]


def retire(item_ids: list[str], *, root: str | Path = ".", golden_path: str | None = None) -> Path:
    """Move items from the golden set to ``regression.jsonl`` beside it (both rewritten atomically)."""
    config = load_config(root)
    path = Path(golden_path or config.path(config.project.golden))
    regression = path.with_name("regression.jsonl")
    keep, move = [], []
    for line in read_text(path).splitlines():
        if line.strip():
            (move if json.loads(line).get("id") in set(item_ids) else keep).append(line)
    previous = read_text(regression).splitlines() if regression.is_file() else []
    atomic_write_text(regression, "\n".join(previous + move) + "\n")
    atomic_write_text(path, "\n".join(keep) + "\n")
    return regression


def ui_command(
    *, root: str | Path = ".", tracking_uri: str | None = None, host: str = "127.0.0.1", port: int = 5000
) -> list[str]:
    """The ``mlflow ui`` command line that serves this project's store."""
    import sys

    from ragtrack.tracking.store import artifact_root, resolve_tracking_uri

    uri = resolve_tracking_uri(load_config(root), tracking_uri)
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", host, "--port", str(port)]
    if artifacts := artifact_root(uri):
        cmd += ["--default-artifact-root", artifacts]
    return cmd
