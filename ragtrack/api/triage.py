"""Bad cases from production: triage the pulled messages, and judge a sample of them.

    from ragtrack.api import triage_logs
    report = triage_logs(sample_rate=0.25)
    for c in report.triage.clusters[:6]:
        print(c.question, c.messages, c.users, c.dislikes, c.covered_by)

The messages are read from the project's ``<experiment>-production`` experiment
(``ragtrack logs pull`` wrote them); the ranking itself is
:mod:`ragtrack.production.triage`. Judging (:mod:`ragtrack.production.judging`) is shared with
the monitor: reference-free judges on a deterministic sample, its cost worked out first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ragtrack.config import ProjectConfig, load_config
from ragtrack.errors import RagtrackError
from ragtrack.evaluation.judges import JudgePanel
from ragtrack.heartbeat import heartbeat
from ragtrack.llm import LLM
from ragtrack.production.judging import Judging, judge_messages, reference_free_panel
from ragtrack.production.messages import ProductionMessage
from ragtrack.production.monitor import Cost, estimate_tokens
from ragtrack.production.signals import in_sample, judges_for, sample_point, signals
from ragtrack.production.thresholds import COVERAGE_SIMILARITY, LOW_RETRIEVAL_SCORE
from ragtrack.production.triage import Triage

if TYPE_CHECKING:
    from ragtrack.tracking.store import Store

#: The share of messages without a dislike that triage judges by default.
TRIAGE_SAMPLE_RATE = 0.25


def judging_cost(messages: list[ProductionMessage], panel: JudgePanel, llm: LLM) -> Cost:
    """Calls, tokens (estimated in, at most out) and money of judging ``messages``, before any call."""
    calls = tokens_in = tokens_out = 0
    for m in messages:
        for judge in judges_for(m):
            step = panel.steps[judge]
            text = step.prompt + m.question + m.answer + "".join(c.text for c in m.contexts)
            calls += 1
            tokens_in += estimate_tokens(text)
            tokens_out += step.max_tokens
    known = llm.price.input or llm.price.output
    usd = llm.price.cost(tokens_in, tokens_out) if known and not llm.is_offline else None
    return Cost(len(messages), calls, tokens_in, tokens_out, usd, llm.is_offline)


@dataclass
class TriageReport:
    triage: Triage
    judging: Judging
    sample_rate: float
    experiment: str  # where the messages were read from
    messages: list[ProductionMessage] = field(default_factory=list, repr=False)
    embedder: object | None = field(default=None, repr=False)  # the question embedder, for reuse


def read_production(
    config: ProjectConfig, tracking_uri: str | None, *, writing: bool = False, quiet_ok: bool = False, **where
) -> tuple[list[ProductionMessage], str, Store]:
    """The pulled messages (``source``, ``app``, ``since``, ``until`` narrow them), the experiment's
    name and the store; an error saying how to pull when there are none (``quiet_ok``: none in the
    window is an answer, a quiet day, as long as the store holds pulled messages at all)."""
    from ragtrack.tracking.production import ProductionLog, read_messages
    from ragtrack.tracking.store import open_store

    store = open_store(config, tracking_uri, existing=True, writing=writing)
    messages = read_messages(store, **where)
    name = ProductionLog(store).experiment_name
    # Quiet: the store holds pulled messages, none in the window (the first page of traces tells).
    if not messages and not (quiet_ok and next(iter(ProductionLog(store).trace_infos()), None)):
        raise RagtrackError(
            f"no production messages in the experiment {name}{narrowed(where)}; "
            "pull some first: `ragtrack logs pull --from dify|ragflow|mlflow|jsonl …`"
        )
    return messages, name, store


def narrowed(where: dict) -> str:
    """`` for since 2025-06-05, app bot-v3``: the filters a reading of messages was given, if any."""
    said = ", ".join(f"{k} {v}" for k, v in where.items() if v)
    return f" for {said}" if said else ""


def triage_logs(
    *,
    root: str | Path = ".",
    tracking_uri: str | None = None,
    source: str | None = None,
    app: str | None = None,
    since: str | None = None,
    until: str | None = None,
    judge: str = "offline",
    sample_rate: float = TRIAGE_SAMPLE_RATE,
    similarity: float | None = None,
    coverage: float = COVERAGE_SIMILARITY,
    low_score: float = LOW_RETRIEVAL_SCORE,
    golden_path: str | None = None,
    corpus_path: str | None = None,
    use_cache: bool = True,
    on_cost: Callable[[Cost], None] = lambda cost: None,
    progress: Callable[[str], None] = lambda line: None,
) -> TriageReport:
    """Rank the pulled messages' bad cases (see :mod:`ragtrack.production.triage`).

    Messages without a dislike are judged by groundedness and relevance at ``sample_rate`` (by a hash of
    each message, so the same ones every time), and every disliked workflow run (to name its failing
    node); ``on_cost`` hears what that costs before the first call.
    Clusters close to a golden item's question (``coverage``) are marked as covered by it. Questions at
    least ``similarity`` alike are one cluster (None: the question space's default threshold).
    """
    from ragtrack.golden import load_golden
    from ragtrack.pipeline.rewrite import looks_like_follow_up, resolve_follow_up
    from ragtrack.production.conversations import earlier_turns
    from ragtrack.production.similarity import QuestionSpace, question_embedder
    from ragtrack.production.triage import triage

    if not 0 <= sample_rate <= 1:
        raise RagtrackError(f"--sample-rate must be between 0 and 1, not {sample_rate}")
    config = load_config(root)
    corpus = config.load_corpus(corpus_path)
    golden_file = Path(golden_path or config.path(config.project.golden))
    golden = load_golden(golden_file, corpus) if golden_file.is_file() else None
    messages, experiment, _ = read_production(config, tracking_uri, source=source, app=app, since=since, until=until)
    progress(f"read {len(messages)} production messages from {experiment}")
    panel, llm = reference_free_panel(judge, config, corpus.language, use_cache)
    # A disliked workflow run is judged too: whether its generation node was grounded names the node.
    sample = sorted(
        (
            m
            for m in messages
            if (m.rating != "dislike" and in_sample(m, sample_rate)) or (m.stages and m.rating == "dislike")
        ),
        key=sample_point,
    )
    cost = judging_cost(sample, panel, llm)
    on_cost(cost)
    judging = judge_messages(sample, panel, cost, progress=progress)
    evidence = {
        m.message_id: signals(
            m,
            {j: v.score for j, v in judging.verdicts.get(m.message_id, {}).items() if v.score is not None},
            low_score,
        )
        for m in messages
    }
    space = QuestionSpace(question_embedder(corpus.language), corpus.language)
    progress(f"clustering {len(messages)} questions ({space.label}; embedding them first, minutes on a busy machine)")
    items = [(i.id, i.question) for i in golden.items] if golden else []
    # A follow-up is clustered as its conversation makes it ("How do I install it?" is two questions
    # after "What is ComfyUI-Manager?" and after "What is a LoRA?"): the offline rewrite's reading.
    turns = earlier_turns(messages)
    read_as = {
        m.key: resolve_follow_up(m.question, turns[m.key])
        for m in messages
        if turns.get(m.key) and looks_like_follow_up(m.question)
    }
    with heartbeat(progress, f"clustering {len(messages)} questions"):
        result = triage(messages, evidence, space, items, similarity=similarity, coverage=coverage, read_as=read_as)
    return TriageReport(result, judging, sample_rate, experiment, messages, space.embedder)


@dataclass
class FromLogsReport:
    path: Path  # the candidates file
    added: list  # Candidate
    skipped: dict[str, str]  # cluster question → why no candidate (covered, proposed before, too few users)
    triage: TriageReport
    weak: dict[str, float] = field(default_factory=dict)  # candidate ID → its GT's best share of the question


def propose_from_logs(
    *,
    min_users: int = 2,
    limit: int | None = None,
    out: str | None = None,
    root: str | Path = ".",
    golden_path: str | None = None,
    corpus_path: str | None = None,
    today: str | None = None,
    **triage_options,
) -> FromLogsReport:
    """One golden candidate per uncovered bad-case cluster (:func:`triage_logs` takes ``triage_options``),
    appended to the candidates file for review (``golden accept`` / ``answer`` / ``audit``).

    A cluster becomes a candidate when at least ``min_users`` distinct users disliked its answers
    (0: every bad case, judge evidence alone too); at most ``limit``, most evidence first. A cluster
    covered by a golden item, or whose messages a candidate or item already came from, is skipped.
    """
    from datetime import UTC, datetime

    from ragtrack.api.golden import default_candidates
    from ragtrack.authoring.candidates import Candidate, next_ids, read_candidates, write_candidates
    from ragtrack.golden import Provenance, load_golden
    from ragtrack.passage_search import PassageSearch, resolve_mode
    from ragtrack.pipeline.models import default_embedding
    from ragtrack.production.conversations import earlier_turns
    from ragtrack.production.proposals import WEAK_MATCH, question_parts, suggest, weak_match

    report = triage_logs(root=root, golden_path=golden_path, corpus_path=corpus_path, **triage_options)
    config = load_config(root)
    corpus = config.load_corpus(corpus_path)
    golden_file = Path(golden_path or config.path(config.project.golden))
    golden = load_golden(golden_file, corpus) if golden_file.is_file() else None
    path = Path(out) if out else default_candidates(golden_file)
    existing = [c for _, c in read_candidates(path)]
    earlier = [*existing, *(golden.items if golden else ())]
    seen_messages = {m for x in earlier if x.provenance for m in x.provenance.messages}
    seen_questions = {x.question.strip() for x in earlier}
    taken = {x.id for x in earlier}

    chosen, skipped = [], {}
    for c in report.triage.clusters:
        if c.covered_by:
            skipped[c.question] = f"covered by golden item {c.covered_by}"
        elif seen_messages & set(c.message_ids) or c.question.strip() in seen_questions:
            skipped[c.question] = "proposed before (its messages are in a candidate or item already)"
        elif c.dislike_users < min_users:
            skipped[c.question] = f"disliked by {c.dislike_users} user(s), fewer than --min-users {min_users}"
        else:
            chosen.append(c)
    for c in chosen[limit:] if limit is not None else []:
        skipped[c.question] = f"beyond --limit {limit}"
    chosen = chosen[:limit] if limit is not None else chosen
    if not chosen:
        return FromLogsReport(path, [], skipped, report)

    embedding = default_embedding(corpus.language)
    mode = resolve_mode("auto", corpus.language, embedding)
    reuse = report.embedder if report.embedder is not None and mode != "bm25" else None
    say = triage_options.get("progress") or (lambda line: None)
    say(f"finding GT passages for {len(chosen)} candidate(s) ({mode} search over {len(corpus)} passages)")
    search = PassageSearch(corpus, config.cache_dir, mode, embedding, embedder=reuse, on_stage=say)  # type: ignore[arg-type]
    by_id = {m.message_id: m for m in report.messages}
    turns_before = earlier_turns(report.messages)
    today = today or datetime.now(UTC).date().isoformat()
    added, weak = [], {}
    for c in chosen:
        texts = list(dict.fromkeys([*c.questions, *question_parts(c.question)]))
        ranked = {t: [h.passage_id for h in search.search(t, 10)] for t in texts}
        disliked: dict[str, int] = {}
        for mid in c.message_ids:
            m = by_id[mid]
            if m.rating == "dislike":
                for pid in {p for ctx in m.contexts for p in ctx.passage_ids}:
                    disliked[pid] = disliked.get(pid, 0) + 1
        suggestions, gt, qtype = suggest(c, ranked, disliked, corpus)
        # The representative question as it was asked: a follow-up keeps the turns before it.
        asked = next((by_id[mid] for mid in c.message_ids if by_id[mid].question == c.question), None)
        history = turns_before.get(asked.key, ()) if asked else ()
        [cid] = next_ids(taken, [qtype])
        taken.add(cid)
        note = _note(c, corpus.language)
        if (share := weak_match(c.question, gt, corpus)) is not None:
            weak[cid] = share
            note += (
                f" WEAK MATCH: the suggested GT passages hold at most {share:.0%} of the question's words "
                f"(under {WEAK_MATCH:.0%}): this corpus may not answer it at all."
            )
        added.append(
            Candidate(
                id=cid,
                question=c.question,
                type=qtype,
                gt_context_ids=tuple(gt),
                suggested_gt=tuple(s.passage_id for s in suggestions),
                suggested_from={s.passage_id: s.marks for s in suggestions},
                source_documents=tuple(dict.fromkeys(corpus.passages[p].doc_id for p in gt)),
                proposer="production logs",
                note=note,
                provenance=Provenance(
                    messages=tuple(c.message_ids),
                    apps=tuple(c.apps),
                    users=c.users,
                    dislikes=c.dislikes,
                    first_seen=c.first_seen,
                    last_seen=c.last_seen,
                    proposed=today,
                    bad_answer=c.answers[0] if c.answers else "",
                    complaints=tuple(c.comments),
                ),
                history=history,
            )
        )
    write_candidates(path, existing + added)
    return FromLogsReport(path, added, skipped, report, weak)


def _note(c, language: str) -> str:
    """What the reviewer needs to know of a production candidate, in the corpus's language."""
    if language == "zh":
        return (
            f"来自线上：{c.messages} 条消息、{c.users} 位用户，{c.dislike_users} 位点踩（{c.why()}）。"
            "gt_context_ids 是建议：请对照 suggested_from 中检索与应用自身召回的段落核对；类型 D 不会自动建议。"
        )
    return (
        f"From production: {c.messages} message(s) from {c.users} user(s), disliked by {c.dislike_users} "
        f"({c.why()}). gt_context_ids is a suggestion: check it against the passages in suggested_from "
        "(corpus search and the app's own contexts); type D is never suggested."
    )
