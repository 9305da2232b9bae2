"""Evaluating a version: answer every golden item, score it, log an MLflow run.

``evaluate`` is three steps a script can also take one by one:
:func:`prepare_eval` (inputs, store, agent, judges, the run),
:func:`run_eval` (the items, checkpointed) and :func:`finish_eval`
(aggregate, diagnose, log).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from ragtrack.agent import Agent, AgentContext, build_agent
from ragtrack.api.arguments import checked_arguments
from ragtrack.config import ProjectConfig, load_config
from ragtrack.corpus import Corpus
from ragtrack.engines import ENGINES, Engine, JudgeSource, VersionSource, Work, make_engine
from ragtrack.engines.local import LocalEngine
from ragtrack.errors import RagtrackError, corpus_warning_lines
from ragtrack.evaluation import metrics as m
from ragtrack.evaluation.aggregate import aggregate
from ragtrack.evaluation.alignment import load_aligned
from ragtrack.evaluation.clustering import cluster_labels
from ragtrack.evaluation.diagnosis import Finding, diagnose, render
from ragtrack.evaluation.human_labels import (
    DEFAULT_PATH,
    MEAN,
    LabelFile,
    PPIReport,
    load_labels,
    match,
    version_figures,
)
from ragtrack.evaluation.judges import JudgePanel
from ragtrack.evaluation.promotion import Rule
from ragtrack.evaluation.runner import Checkpoint, EvalOutcome, ItemSink
from ragtrack.golden import GoldenSet, check_ready, example_caution, load_golden
from ragtrack.llm import make_llm
from ragtrack.llm.accounting import Accounting, Usage
from ragtrack.records import ItemRecord
from ragtrack.spec import LoadedSpec, load_spec
from ragtrack.tracking import datasets, runs
from ragtrack.tracking.models import ModelRef, ensure_version_model, model_uri, spec_change
from ragtrack.tracking.promotion import unfinished
from ragtrack.tracking.source import source_tags
from ragtrack.tracking.store import Store, Tag, local_database, open_store, resolve_tracking_uri


@dataclass
class EvalReport:
    """One eval of one version, as logged to the MLflow run ``run_id``.

    ``metrics`` holds what the run logged, unrounded (overall, ``<metric>/type_<T>`` per type,
    ``counts/judged/<judge>`` items judged; the run keeps them to three decimals); ``records`` one
    :class:`~ragtrack.records.ItemRecord` per golden item (answer, contexts, scores, errors);
    ``findings`` the diagnosis.
    Before trusting the figures, read :meth:`cautions` and :meth:`error_summary`, as
    ``ragtrack eval`` prints them. The repr leaves out the bulky fields.
    """

    version: str
    run_id: str
    tracking_uri: str
    model_version: str
    metrics: dict[str, float] = field(repr=False)
    records: list[ItemRecord] = field(repr=False)
    accounting: dict[str, dict[str, dict[str, float]]] = field(repr=False)  # "agent"/"judge" → step → figures
    findings: list[Finding] = field(repr=False)
    params: dict[str, str] = field(repr=False)
    resumed: int = 0
    stopped_early: str | None = None
    refused: bool = False  # stopped because an endpoint refused the configuration (key, model, URL)
    setup: str = ""  # what getting the agent ready did: "index from cache", "index built"
    warnings: dict[str, str] = field(default_factory=dict)  # the agent's (code → sentence), tagged on the run
    substituted: bool = False
    # What the golden set as evaluated means for the figures: a --limit cut, stale GT let through.
    limits: list[str] = field(default_factory=list, repr=False)
    # The judged metrics' prediction-powered means from the human labels of this version's answers.
    ppi: PPIReport | None = field(default=None, repr=False)

    @property
    def complete(self) -> bool:
        return self.stopped_early is None

    @property
    def measured(self) -> bool:
        """At least one item got an answer (a run where every call failed measured nothing)."""
        return any(r.answered for r in self.records)

    @property
    def judged(self) -> bool:
        """A judge gave at least one verdict, or no judge was asked (a run whose every judge call failed or
        was unreadable has no judge figure at all)."""
        verdicts = [j for r in self.records for j in r.judges.values()]
        return not verdicts or any(j.score is not None for j in verdicts)

    def cautions(self) -> list[str]:
        """What the figures depend on: question types a ``limit`` left out, the agent's warnings (a
        substituted model, an English embedder on Chinese text), questions without an answer, replies
        that said nothing of retrieval, contexts that map to no passage. (Warnings about the input
        files reach ``Progress.on_warning`` only.)"""
        from ragtrack.report import eval_warnings

        return [*self.limits, *self.warnings.values(), *eval_warnings(self.metrics)]

    def error_summary(self) -> list[str]:
        """The run's distinct errors, most frequent first, each with its item count and first item IDs."""
        from ragtrack.report import error_lines

        return error_lines(self.records)


@dataclass
class Progress:
    """Callbacks the CLI uses to draw its progress bar (all optional)."""

    on_stage: Callable[[str], None] = lambda stage: None
    on_start: Callable[[int, int], None] = lambda total, resumed: None
    on_item: Callable[[ItemRecord], None] = lambda record: None
    # Something the user must see before trusting the run (corpus warnings, the agent's warnings).
    on_warning: Callable[[str], None] = lambda message: None
    # Interrupted (Ctrl-C, SIGTERM) with this many items in the checkpoint: what the same command skips.
    # Counted from the checkpoint file, as a resume counts: a signal landing after an item's line was
    # written and before on_item was called (the line's fsync, under load) left on_item's count one short.
    on_interrupted: Callable[[int], None] = lambda kept: None


def load_inputs(config: ProjectConfig, corpus_path: str | None, golden_path: str | None) -> tuple[Corpus, GoldenSet]:
    corpus = config.load_corpus(corpus_path)
    golden = load_golden(golden_path or config.path(config.project.golden), corpus)
    return corpus, golden


def load_human_labels(config: ProjectConfig, path: str | None) -> LabelFile | None:
    """The human-label file ``path`` (a ``--human-labels``) or ``[project] human_labels`` names, every
    line checked; without either, the project's golden/labels/human-labels.jsonl when there is one.
    None: no labels, so no prediction-powered figures."""
    if path or config.project.human_labels:
        return load_labels(path or config.path(config.project.human_labels))
    default = config.path(DEFAULT_PATH)
    return load_labels(default) if default.is_file() else None


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
    gates: dict[str, float] = field(default_factory=dict)  # the project's release gates, for the run's dry decision
    limits: dict[str, str] = field(default_factory=dict)  # caution code → message (see EvalReport.limits)
    cluster: str = "document"  # what the comparison with the champion resamples ([compare] cluster)
    engine: Engine = field(default_factory=LocalEngine)  # where the items are answered and judged
    source: VersionSource | None = None  # what an engine outside this process rebuilds the version from
    labels: LabelFile | None = None  # human labels of versions' answers (prediction-powered means)
    guards: dict[str, float] = field(default_factory=dict)  # [promotion] node guards, for the dry decision


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
    allow_stale: bool = False
    judge_samples: int | None = None  # None: [eval] judge_samples
    engine: str = "local"
    master: str | None = None
    judge_aligned: bool | None = None  # None: [eval] judge_aligned
    human_labels: str | None = None  # None: [project] human_labels, else the project's default file

    def __post_init__(self) -> None:
        ENGINES.check(self.engine)
        # As the CLI's --limit: a whole number of items from 1 (0 would log an empty "complete" run).
        if self.limit is not None and (
            isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1
        ):
            raise RagtrackError(f"limit must be a whole number of items, 1 or more (got {self.limit!r})")


def with_llm(spec: LoadedSpec, llm: str | None) -> LoadedSpec:
    """``spec`` with ``--llm`` as its pipeline's LLM (a version of its own: another spec hash)."""
    if llm is None:
        return spec
    if spec.kind != "pipeline":
        raise RagtrackError(f"--llm sets the LLM of a ragtrack pipeline; {spec.name} is a {spec.kind} agent")
    return spec.with_values({"llm": {"model": llm}})


@checked_arguments
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
    allow_stale: bool = False,
    judge_samples: int | None = None,
    engine: str = "local",
    master: str | None = None,
    judge_aligned: bool | None = None,
    human_labels: str | None = None,
    progress: Progress | None = None,
) -> EvalReport:
    """Answer every golden item with ``version``, score it and log an MLflow run.

    ``llm`` replaces the LLM of a pipeline's steps, ``judge`` the judges' (both:
    ``offline``, ``openai:<model>``, ``local:<path>`` or a profile); ``limit``
    takes the first N items (a different golden digest). An interrupted eval
    resumes from its checkpoint when started again with the same inputs
    (``fresh=True`` starts over). Items without a GT answer, or whose GT passages
    changed since they were written, are refused (``allow_stale`` scores the latter).
    ``judge_samples`` asks each LLM judge that many times per item (default ``[eval] judge_samples``).
    ``judge_aligned`` judges with the aligned judge ``judge align`` saved for ``judge`` (default
    ``[eval] judge_aligned``): its graded examples make it another judge identity.
    ``engine`` answers and judges the items here (``local``) or on Spark (``spark``, on ``master``,
    default ``[spark] master`` of ragtrack.toml): the same records, the same run.
    ``human_labels`` names a file of human labels of versions' answers (default ``[project] human_labels``,
    else golden/labels/human-labels.jsonl when present): the report's ``ppi`` then holds each judged
    metric's prediction-powered mean beside the judge's, and the run logs them and the file as a dataset.
    """
    progress = progress or Progress()
    options = EvalOptions(
        root,
        golden_path,
        corpus_path,
        limit,
        llm,
        judge,
        judge_language,
        tracking_uri,
        use_cache,
        fresh,
        allow_stale,
        judge_samples,
        engine,
        master,
        judge_aligned,
        human_labels,
    )
    session = prepare_eval(version, options, progress)
    with ends_run_on_error(session, progress):
        outcome = run_eval(session, progress)
        progress.on_stage("logging to MLflow")
        return finish_eval(session, outcome)


@contextmanager
def ends_run_on_error(session: EvalSession, progress: Progress | None = None) -> Iterator[None]:
    """Whatever stops the eval after its run started ends the run — KILLED for an interruption
    (Ctrl-C, SIGTERM), FAILED for an error — and keeps the checkpoint, so the same command resumes
    (this process lets go of it); an interruption tells ``progress`` how many items it kept."""
    try:
        yield
    except BaseException as e:
        status = "KILLED" if isinstance(e, KeyboardInterrupt | SystemExit) else "FAILED"
        with suppress(Exception):  # the store may be what failed; the original error matters more
            session.store.finish_run(session.run_id, status)
        session.checkpoint.release()
        if progress and isinstance(e, KeyboardInterrupt):
            with suppress(Exception):  # an unreadable checkpoint: the interruption is what to report
                progress.on_interrupted(len(session.checkpoint.load()[1]))
        raise


def prepare_eval(version: str, options: EvalOptions, progress: Progress | None = None) -> EvalSession:
    """Load the inputs, open the store, build the agent and the judges, and start (or reopen) the run."""
    o, progress = options, progress or Progress()
    config = load_config(o.root)
    engine = make_engine(o.engine, config, o.master)  # a --master without --engine spark fails before any work
    progress.on_stage("loading corpus and golden set")
    corpus, golden = load_inputs(config, o.corpus_path, o.golden_path)
    labels = load_human_labels(config, o.human_labels)  # a bad line stops the eval before its run starts
    spec = load_spec(version, config.path(config.project.pipelines), config.root, corpus.language)
    if spec.builtin:
        progress.on_stage(f"built-in {spec.name} for a {corpus.language} corpus ({Path(spec.path).name})")
    spec = with_llm(spec, o.llm)
    full, golden = golden, golden.limit(o.limit)
    limits: dict[str, str] = {}  # tagged ragtrack.warning.<code> on the run; its description lists them
    if missed := sorted({i.type for i in full.items} - {i.type for i in golden.items}):
        limits["limit"] = (
            f"--limit {o.limit} takes the first {len(golden)} items in file order: no item of type "
            f"{', '.join(missed)}, so the per-type figures and the means speak for part of the golden set"
        )
    if stale := check_ready(golden, corpus, allow_stale=o.allow_stale):
        ids = ", ".join(s.item_id for s in stale[:6]) + (f" and {len(stale) - 6} more" if len(stale) > 6 else "")
        limits["stale_gt"] = (
            f"--allow-stale: {len(stale)} item(s) scored against GT passages the corpus changed or removed "
            f"since they were written ({ids}); their retrieval figures may be wrong (`ragtrack golden validate`)"
        )
    if example := example_caution(golden):
        limits["example_golden"] = example
    for message in limits.values():
        progress.on_warning(message)
    min_overlap = config.eval.min_overlap
    language = o.judge_language or golden.language
    # The judge before the store: an unknown profile or an unset key must not leave a new empty store.
    judge_name = o.judge or config.eval.judge
    judge_llm = make_llm(judge_name, config, use_cache=o.use_cache)
    samples = o.judge_samples or config.eval.judge_samples
    aligned = config.eval.judge_aligned if o.judge_aligned is None else o.judge_aligned
    if aligned and judge_llm.is_offline:
        raise RagtrackError(
            "the offline judges are heuristics with no prompt to align: --plain-judge, or an LLM --judge"
        )
    alignment = load_aligned(config.root, judge_name, judge_llm.identity) if aligned else None
    panel = JudgePanel.create(
        judge_llm,
        language,
        config.eval.judge_max_tokens,
        samples,
        alignment.examples(language) if alignment else None,
        alignment.digest if alignment else "",
    )
    if alignment is not None:
        progress.on_stage(f"aligned judge {alignment.digest} ({alignment.path}): {', '.join(alignment.judges)}")
    if samples > 1 and judge_llm.is_offline:
        progress.on_stage(f"the heuristic judges are deterministic: each asked once, not {samples} times")
    database = local_database(resolve_tracking_uri(config, o.tracking_uri))
    if database is not None and not database.exists():  # the first eval here, or a mistyped --tracking-uri
        progress.on_stage(f"a new tracking store: {database}")
    store = open_store(config, o.tracking_uri)
    # Once the store answers (an error stays one line), and once per corpus change, not at every eval.
    shown, standing = corpus_warning_lines(corpus.warnings, config.cache_dir, corpus.digest)
    for line in shown:
        progress.on_warning(line)
    if standing:
        progress.on_stage(standing)
    for note in unfinished(store):  # the champion this eval will be compared with is not as promote left it
        progress.on_warning(note)

    key = hashlib.sha256(
        "|".join([spec.hash, golden.digest, panel.identity, str(min_overlap), language]).encode()
    ).hexdigest()[:16]
    checkpoint = Checkpoint(config.cache_dir.parent / "checkpoints" / f"{spec.name}-{key}.jsonl")
    checkpoint.ensure_writable()  # before the index build: without it, an eval could not resume
    checkpoint.hold()  # one eval per checkpoint: a second would take this one's for an interrupted run
    try:
        progress.on_stage(f"building {spec.name} (index, models)")
        agent = build_agent(spec, AgentContext(corpus, config, min_overlap, o.use_cache, on_stage=progress.on_stage))
        for message in agent.setup.warnings.values():
            progress.on_warning(message)
        # Absolute: the model answers wherever it is loaded, not from the folder the eval ran in.
        model = ensure_version_model(store, spec, str(Path(corpus.source).resolve()), str(Path(o.root).resolve()))
        if change := spec_change(store, spec, model):
            progress.on_warning(change)

        header, done, build_usage = checkpoint.load()
        other_app = bool(header.get("run_id")) and header.get("runtime", "") != agent.identity.runtime
        if other_app:  # same spec, another key: another app answered the items done so far
            progress.on_warning(
                f"the interrupted run {header['run_id']} was answered with another key (another app): "
                "starting a new run"
            )
        if o.fresh or other_app:
            if header.get("run_id") and store.run_status(header["run_id"]) == "RUNNING":
                store.finish_run(header["run_id"], "KILLED")  # the interrupted run is closed, not left RUNNING
            checkpoint.remove()
            header, done, build_usage = {}, {}, {}
        params = runs.eval_params(spec, corpus, golden, panel, agent, model, min_overlap)
        tags = {
            **runs.eval_tags(spec, golden, panel, agent, model, full, limits),
            Tag.ENGINE: engine.label,
            **source_tags(o.root),
        }
        run_id = store.start_run(f"eval {spec.name}", params, tags, run_id=header.get("run_id"))
        datasets.log_golden_dataset(store, run_id, golden, stale)
        checkpoint.start({"run_id": run_id, "version": spec.name, "runtime": agent.identity.runtime})
        checkpoint.add_build(agent.setup.usage)
        for step, usage in agent.setup.usage.items():
            build_usage.setdefault(step, Usage()).add(usage)
        return EvalSession(
            spec,
            corpus,
            golden,
            agent,
            panel,
            store,
            model,
            checkpoint,
            run_id,
            params,
            done,
            build_usage,
            dict(config.gates),
            limits,
            config.compare.cluster,
            engine,
            VersionSource(
                model_uri(store, model),
                str(Path(corpus.source).resolve()),
                corpus.digest,
                JudgeSource(str(Path(o.root).resolve()), judge_name, o.use_cache, bool(panel.aligned)),
            ),
            labels,
            guards=config.promotion.guard_rule,
        )
    except BaseException:
        checkpoint.release()
        raise


def run_eval(session: EvalSession, progress: Progress | None = None) -> EvalOutcome:
    """Answer and score every item not finished yet (each one checkpointed as it finishes)."""
    progress = progress or Progress()
    sink = ItemSink(session.golden, session.done, session.checkpoint, progress.on_item)
    progress.on_start(len(session.golden), sink.resumed)
    return session.engine.run(Work(session.agent, session.panel, sink, session.source, progress.on_stage))


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
                metrics[m.usage_key(who, step, name)] = value
    here = max(session.panel.llm.limiter.peak_in_flight, session.agent.peak_in_flight)
    metrics[m.PEAK_IN_FLIGHT] = here if outcome.peak_in_flight is None else max(here, outcome.peak_in_flight)

    ppi = None
    if session.labels is not None:
        matched = match(session.labels, session.spec.name, records)
        ppi = PPIReport(
            session.labels,
            (matched,),
            version_figures(records, matched, clusters=cluster_labels(records, session.cluster)),
        )
        metrics |= ppi.metrics(MEAN)
    findings = diagnose(metrics, records)
    runs.record_eval(
        session.store,
        session.run_id,
        session.model.model_id,
        records,
        metrics,
        render(findings),
        accounting,
        Rule(gates=session.gates, cluster=session.cluster, guards=session.guards),
        ppi,
    )
    complete = outcome.stopped_early is None and len(records) == len(session.golden)
    session.store.finish_run(session.run_id, "FINISHED" if complete else "KILLED")
    if complete:
        session.checkpoint.remove()
    session.checkpoint.release()
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
        refused=outcome.refused,
        setup=session.agent.setup.summary,
        warnings=dict(session.agent.setup.warnings),
        substituted=session.agent.substituted,
        limits=list(session.limits.values()),
        ppi=ppi,
    )
