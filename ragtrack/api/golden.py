"""Building the golden set and keeping it honest.

Build (the seeds' SOP): propose candidates, accept the reviewed ones, answer
them from their GT, audit them. Keep: validate (with stale GT and missing
answers), fingerprint, count, retire what every version aces, import public
benchmarks.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ragtrack.authoring import PROMPT_CHARS, labelled_passages, load_prompt, resolve_labels, unlabel
from ragtrack.authoring.candidates import Accepted, Candidate, accept, next_ids, read_candidates, write_candidates
from ragtrack.config import ProjectConfig, load_config
from ragtrack.corpus import Corpus, Passage
from ragtrack.errors import RagtrackError
from ragtrack.files import atomic_write_json, atomic_write_text, read_text
from ragtrack.golden import (
    TYPES,
    GoldenItem,
    GoldenSet,
    Staleness,
    load_golden,
    rewrite_golden,
    shape_problems,
    staleness,
    unanswered,
    unfingerprinted,
    with_fingerprint,
)
from ragtrack.llm import make_llm
from ragtrack.text import language_of

if TYPE_CHECKING:
    from ragtrack.authoring.audit import AuditResult
    from ragtrack.normalized import Imported


def validate_golden(
    *, root: str | Path = ".", corpus_path: str | None = None, golden_path: str | None = None
) -> tuple[Corpus, GoldenSet]:
    """The corpus and the golden set, validated against each other (every problem with file, line, field)."""
    inputs = _inputs(root, corpus_path, golden_path)
    return inputs.corpus, inputs.golden


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
    inputs = _inputs(root, None, golden_path)
    config, golden = inputs.config, inputs.golden
    from ragtrack.tracking.store import open_store

    store = open_store(config, tracking_uri, existing=True, writing=False)
    perfect: set[str] | None = None
    for name in version_names:
        records = store.records(store.latest_eval(name, golden.digest).run_id)
        full = {
            r.id
            for r in records
            if r.retrieval.get("context_recall") == 1.0
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


# ---------------------------------------------------------------- checking: stale GT, missing answers


@dataclass(frozen=True)
class GoldenCheck:
    """A loaded golden set and what keeps it from being scored: stale GT, items without an answer."""

    corpus: Corpus
    golden: GoldenSet
    stale: list[Staleness]
    unanswered: list[str]
    unfingerprinted: list[str]
    # "file:line: id: why" for items whose GT contradicts their type (accept refuses such candidates; a
    # hand-written item is only warned about: `golden audit` says more)
    shapes: list[str] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return not self.stale and not self.unanswered


def check_golden(
    *, root: str | Path = ".", corpus_path: str | None = None, golden_path: str | None = None
) -> GoldenCheck:
    """Validate the golden set, then find items whose GT passages changed or disappeared since they
    were written, items still waiting for a GT answer, and items with no fingerprint to check."""
    corpus, golden = validate_golden(root=root, corpus_path=corpus_path, golden_path=golden_path)
    shapes = [f"{golden.where(i.id)}: {i.id}: {why}" for i in golden.items for why in shape_problems(i, corpus)]
    return GoldenCheck(corpus, golden, staleness(golden, corpus), unanswered(golden), unfingerprinted(golden), shapes)


def fingerprint_golden(
    *,
    item_ids: list[str] | None = None,
    everything: bool = False,
    root: str | Path = ".",
    corpus_path: str | None = None,
    golden_path: str | None = None,
) -> list[str]:
    """(Re)write GT fingerprints from the corpus as it is now; returns the items written.

    By default only items without one; ``item_ids`` re-baselines those items
    (after a person checked that their GT answer still holds), ``everything``
    every item.
    """
    inputs = _inputs(root, corpus_path, golden_path)
    corpus, golden = inputs.corpus, inputs.golden
    by_id = {i.id: i for i in golden.items}
    unknown = [i for i in item_ids or [] if i not in by_id]
    if unknown:
        raise RagtrackError(f"no item {', '.join(unknown)} in {golden.source}")
    if everything:
        chosen = list(golden.items)
    elif item_ids:
        chosen = [by_id[i] for i in item_ids]
    else:
        chosen = [i for i in golden.items if not i.gt_fingerprint]
    gone = [f"{i.id}: {cid}" for i in chosen for cid in i.gt_context_ids if cid not in corpus.passages]
    if gone:
        raise RagtrackError(
            "GT passages no longer in the corpus (fix the items' gt_context_ids first): " + ", ".join(gone)
        )
    rewrite_golden(inputs.golden_path, replace={i.id: with_fingerprint(i, corpus) for i in chosen})
    return [i.id for i in chosen]


# ---------------------------------------------------------------- building: propose, accept, answer, audit


@dataclass(frozen=True)
class _Inputs:
    config: ProjectConfig
    corpus: Corpus
    golden: GoldenSet | None
    golden_path: Path


def _inputs(root: str | Path, corpus_path: str | None, golden_path: str | None, need_golden: bool = True) -> _Inputs:
    config = load_config(root)
    corpus = config.load_corpus(corpus_path)
    path = Path(golden_path or config.path(config.project.golden))
    golden = load_golden(path, corpus) if need_golden or path.is_file() else None
    return _Inputs(config, corpus, golden, path)


def default_candidates(golden_path: Path) -> Path:
    """Where candidates wait for review: ``candidates.jsonl`` beside the golden set."""
    return golden_path.with_name("candidates.jsonl")


@dataclass
class ProposeReport:
    path: Path
    added: list[Candidate]
    notes: list[str]  # types skipped, duplicates, unusable parts of a reply
    failed: dict[str, str]  # type → why its step failed
    proposer: str  # the LLM identity, or "offline-template"
    accounting: dict[str, dict[str, float]]


EXTRA_ASKED = 20  # at most this many more candidates asked of a proposer than the user wants


def propose(
    documents: list[str],
    *,
    types: list[str] | None = None,
    n: int = 2,
    llm: str = "offline",
    language: str | None = None,
    out: str | None = None,
    root: str | Path = ".",
    corpus_path: str | None = None,
    golden_path: str | None = None,
    use_cache: bool = True,
) -> ProposeReport:
    """Propose up to ``n`` candidate questions per type from ``documents``, appended to the candidates file.

    Types C and D draw on several documents: with one document they are skipped
    (an error when asked for explicitly). A question already in the candidates
    file or the golden set is not added again.
    """
    from ragtrack.api.corpus import select_documents
    from ragtrack.authoring.propose import (
        MULTI_DOCUMENT,
        PROPOSE_SCHEMA,
        TEMPLATE_NOTE,
        TEMPLATE_TAG,
        ProposeInput,
        ProposeStep,
    )

    inputs = _inputs(root, corpus_path, golden_path, need_golden=False)
    docs = select_documents(inputs.corpus, documents)
    passages = tuple(p for d in docs for p in d.passages)
    language = language or language_of("".join(p.text for p in passages))
    wanted = list(dict.fromkeys(types or TYPES))
    notes = []
    if len(docs) < 2 and (blocked := [t for t in wanted if t in MULTI_DOCUMENT]):
        if types:
            raise RagtrackError(
                f"type(s) {', '.join(blocked)} need passages of at least two documents: pass --doc twice"
            )
        wanted = [t for t in wanted if t not in MULTI_DOCUMENT]
        notes.append("types C and D skipped: they need at least two documents (pass --doc more than once)")

    client = make_llm(llm, inputs.config, use_cache=use_cache)
    if not client.is_offline and (size := len(labelled_passages(passages))) > PROMPT_CHARS:
        raise RagtrackError(
            f"the chosen documents hold {size} characters of passages; one proposer prompt takes at most "
            f"{PROMPT_CHARS}: propose from fewer --doc at a time"
        )
    path = Path(out) if out else default_candidates(inputs.golden_path)
    existing = [c for _, c in read_candidates(path)]
    golden_items = inputs.golden.items if inputs.golden else ()
    seen = {c.question.strip() for c in existing} | {i.question.strip() for i in golden_items}
    taken = {c.id for c in existing} | {i.id for i in golden_items}

    # Ask for as many more as there are questions of the type already, so that the ones proposed
    # before (a deterministic proposer proposes them again) do not leave fewer than n new ones.
    def asked(t: str) -> int:
        return n + min(EXTRA_ASKED, sum(1 for x in (*existing, *golden_items) if x.type == t))

    step = ProposeStep("golden.propose", load_prompt("propose", language), max_tokens=2048, json_schema=PROPOSE_SCHEMA)
    results = client.map(step, [ProposeInput(t, asked(t), passages, language) for t in wanted])
    added, failed = [], {}
    proposer = "offline-template" if client.is_offline else client.identity
    for t, result in zip(wanted, results, strict=True):
        if not result.ok:
            failed[t] = result.error or "failed"
            continue
        notes += [f"type {t}: {d}" for d in result.value.dropped]
        new = 0
        for raw in [c for c in result.value.candidates if c.type == t]:
            if new == n:
                break
            ids, unknown = resolve_labels(list(raw.labels), passages)
            if unknown:
                notes.append(f"type {t}: {raw.question[:40]!r} cites unknown passage labels {', '.join(unknown)}")
            if not ids:
                continue
            if raw.question in seen:
                notes.append(f"type {t}: already proposed: {raw.question[:60]}")
                continue
            seen.add(raw.question)
            new += 1
            [cid] = next_ids(taken, [t])
            taken.add(cid)
            added.append(
                Candidate(
                    id=cid,
                    question=raw.question,
                    type=t,
                    gt_context_ids=tuple(ids),
                    suggested_gt=tuple(ids),
                    tags=(TEMPLATE_TAG,) if raw.template else (),
                    solution_path=unlabel(raw.solution_path, passages),
                    draft_answer=raw.draft_answer,
                    source_documents=tuple(dict.fromkeys(inputs.corpus.passages[i].doc_id for i in ids)),
                    proposer=proposer,
                    note=TEMPLATE_NOTE[language] if raw.template else "",
                )
            )
    if added:
        write_candidates(path, existing + added)
    return ProposeReport(path, added, notes, failed, proposer, client.accounting.summary())


def accept_candidates(
    *,
    item_ids: list[str] | None = None,
    candidates_path: str | None = None,
    root: str | Path = ".",
    corpus_path: str | None = None,
    golden_path: str | None = None,
) -> tuple[Accepted, Path]:
    """Move reviewed candidates (``"status": "accepted"``, or ``item_ids``) into the golden set."""
    inputs = _inputs(root, corpus_path, golden_path, need_golden=False)
    path = Path(candidates_path) if candidates_path else default_candidates(inputs.golden_path)
    return accept(path, inputs.golden_path, inputs.golden, inputs.corpus, item_ids), inputs.golden_path


@dataclass
class AnswerReport:
    golden_path: Path
    written: list[str]
    failed: dict[str, str]  # item → error (its raw reply is in the error when unreadable)
    skipped: dict[str, str]  # item → why it was not answered
    offline: bool
    accounting: dict[str, dict[str, float]]


def answer_golden(
    *,
    llm: str = "offline",
    item_ids: list[str] | None = None,
    force: bool = False,
    language: str | None = None,
    root: str | Path = ".",
    corpus_path: str | None = None,
    golden_path: str | None = None,
    use_cache: bool = True,
) -> AnswerReport:
    """Write the GT answer of every item that has GT passages and no answer (``item_ids`` and
    ``force`` rewrite chosen ones), fused from the GT passages; the items' fingerprints are renewed."""
    from ragtrack.authoring.answer import ANSWER_SCHEMA, AnswerInput, AnswerStep

    inputs = _inputs(root, corpus_path, golden_path)
    corpus, golden = inputs.corpus, inputs.golden
    chosen, skipped = _choose(golden, item_ids)
    todo = []
    for item in chosen:
        if item.answered and not force:
            skipped[item.id] = "already has a GT answer (--force rewrites it)"
        elif any(cid not in corpus.passages for cid in item.gt_context_ids):
            skipped[item.id] = "a GT passage is no longer in the corpus"
        else:
            todo.append(item)
    language = language or golden.language
    client = make_llm(llm, inputs.config, use_cache=use_cache)
    step = AnswerStep("golden.answer", load_prompt("answer", language), max_tokens=1024, json_schema=ANSWER_SCHEMA)
    results = client.map(step, [AnswerInput(i.question, _gt(i, corpus), language, i.history) for i in todo])
    replace, failed = {}, {}
    for item, result in zip(todo, results, strict=True):
        if result.ok:
            replace[item.id] = with_fingerprint(item.model_copy(update={"gt_answer": result.value}), corpus)
        else:
            failed[item.id] = result.error or "failed"
    if replace:
        rewrite_golden(inputs.golden_path, replace=replace)
    return AnswerReport(
        inputs.golden_path, list(replace), failed, skipped, client.is_offline, client.accounting.summary()
    )


@dataclass
class AuditReport:
    results: list[AuditResult]
    report_path: Path
    auditor: str  # the LLM identity, or the heuristic's name
    accounting: dict[str, dict[str, float]]

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)


def audit_golden(
    *,
    llm: str = "offline",
    item_ids: list[str] | None = None,
    report_path: str | None = None,
    language: str | None = None,
    root: str | Path = ".",
    corpus_path: str | None = None,
    golden_path: str | None = None,
    use_cache: bool = True,
) -> AuditReport:
    """Audit every item (or ``item_ids``): its GT answer against its GT passages, its GT set for
    sufficiency and minimality, and its GT against its type. Writes a report (Markdown, or JSON
    when the path ends in ``.json``, default ``audit.md`` beside the golden set)."""
    from ragtrack.authoring.audit import (
        AUDIT_SCHEMA,
        ERROR,
        HEURISTIC,
        NEEDS_CHANGE,
        AuditInput,
        AuditResult,
        AuditStep,
        result_of,
    )

    inputs = _inputs(root, corpus_path, golden_path)
    corpus, golden = inputs.corpus, inputs.golden
    chosen, _ = _choose(golden, item_ids)
    language = language or golden.language
    client = make_llm(llm, inputs.config, use_cache=use_cache)
    step = AuditStep("golden.audit", load_prompt("audit", language), max_tokens=768, json_schema=AUDIT_SCHEMA)
    structural: dict[str, list[str]] = {}
    todo = []
    for item in chosen:
        problems = shape_problems(item, corpus)
        problems += [
            f"GT passage {cid} is no longer in the corpus" for cid in item.gt_context_ids if cid not in corpus.passages
        ]
        if not item.answered:
            problems.append("no GT answer yet: run `ragtrack golden answer`")
        structural[item.id] = problems
        if item.answered and all(cid in corpus.passages for cid in item.gt_context_ids):
            todo.append(item)
    verdicts = dict(
        zip(
            [i.id for i in todo],
            client.map(step, [AuditInput(i.question, i.gt_answer, _gt(i, corpus), language, i.history) for i in todo]),
            strict=True,
        )
    )
    results = []
    for item in chosen:
        result = verdicts.get(item.id)
        if result is None:
            out = AuditResult(item.id, NEEDS_CHANGE)
        elif result.ok:
            out = result_of(item.id, result.value, _gt(item, corpus))
        else:
            out = AuditResult(item.id, ERROR, error=result.error, raw=result.raw)
        if structural[item.id]:
            out.verdict = ERROR if out.verdict == ERROR else NEEDS_CHANGE
            out.reason = "; ".join([*structural[item.id], *([out.reason] if out.reason else [])])
        results.append(out)
    auditor = HEURISTIC if client.is_offline else client.identity
    path = Path(report_path) if report_path else inputs.golden_path.with_name("audit.md")
    report = AuditReport(results, path, auditor, client.accounting.summary())
    if path.suffix == ".json":
        atomic_write_json(
            path, {"auditor": auditor, "golden": str(inputs.golden_path), "items": [r.to_json() for r in results]}
        )
    else:
        atomic_write_text(path, audit_markdown(report, golden))
    return report


def audit_markdown(report: AuditReport, golden: GoldenSet) -> str:
    """The audit report a person reads: every item that needs a change, with what to change."""
    failed = [r for r in report.results if not r.passed]
    lines = [
        f"# Golden set audit: {golden.source}",
        "",
        f"Auditor: {report.auditor}",
        f"Items: {len(report.results)}; pass {len(report.results) - len(failed)}; needs change or error {len(failed)}",
        "",
    ]
    for r in failed:
        lines += [f"## {r.item_id}: {r.verdict}", "", f"{golden.where(r.item_id)}", ""]
        if r.reason:
            lines += [r.reason, ""]
        lines += [f"- unsupported sentence: {s}" for s in r.unsupported]
        if r.missing:
            lines.append(f"- missing: {r.missing}")
        lines += [f"- superfluous GT passage: {pid}" for pid in r.superfluous]
        if r.error:
            lines.append(f"- auditor reply unreadable: {r.error}")
        lines.append("")
    passed = [r.item_id for r in report.results if r.passed]
    if passed:
        lines += ["## Passed", "", ", ".join(passed), ""]
    return "\n".join(lines)


def _choose(golden: GoldenSet, item_ids: list[str] | None) -> tuple[list[GoldenItem], dict[str, str]]:
    if not item_ids:
        return list(golden.items), {}
    by_id = {i.id: i for i in golden.items}
    unknown = [i for i in item_ids if i not in by_id]
    if unknown:
        raise RagtrackError(f"no item {', '.join(unknown)} in {golden.source}")
    return [by_id[i] for i in item_ids], {}


def _gt(item: GoldenItem, corpus: Corpus) -> tuple[Passage, ...]:
    return tuple(corpus.passages[cid] for cid in item.gt_context_ids)


def import_benchmark(folder: str, *, out: str, fmt: str = "normalized", limit: int | None = None) -> Imported:
    """A public benchmark (``normalized``: corpus.jsonl, queries.jsonl) → ``out/corpus.jsonl``, ``out/golden.jsonl``."""
    from ragtrack.normalized import FORMATS, import_normalized

    if fmt not in FORMATS:
        raise RagtrackError(f"unknown import format {fmt!r}; expected one of: {', '.join(FORMATS)}")
    return import_normalized(folder, out, limit)
