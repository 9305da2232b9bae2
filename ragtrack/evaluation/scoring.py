"""One scoring path: (golden item, agent output, judges) → item record.

``ragtrack eval``, the ``mlflow.model_evaluator`` plugin and judge
calibration all score through here, so a metric means the same thing
wherever it is computed. :func:`score_item` does it in one call; the eval
runner, which schedules each judge call separately so an endpoint stays busy,
uses the two halves: :func:`judge_input` and :func:`item_record`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from ragtrack.agent import AgentOutput, RetrievedContext, turns_json
from ragtrack.citation_markers import cited_sentences
from ragtrack.evaluation.citation_judge import SupportInput, judge_support
from ragtrack.evaluation.citations import CitationScores, score_citations, support_rate
from ragtrack.evaluation.judges import JUDGES, JudgeInput, JudgePanel
from ragtrack.evaluation.nodes import first_failing, rewritten
from ragtrack.evaluation.retrieval_metrics import retrieval_scores
from ragtrack.evaluation.rewrite_judge import STEP as FIDELITY_STEP
from ragtrack.evaluation.rewrite_judge import (
    FidelityInput,
    FidelityStep,
    FidelityVerdict,
    fidelity_step,
    judge_fidelity,
)
from ragtrack.golden import GoldenItem
from ragtrack.llm.accounting import Usage
from ragtrack.records import ContextRecord, ItemRecord, JudgeRecord, StageRecord, passage_groups
from ragtrack.text import is_refusal

#: The judge step that reads cited sentences, in an item's judge usage.
CITATION_SUPPORT = "judge.citation_support"


@dataclass(frozen=True)
class CitationCheck:
    """An answer's citations scored from IDs, and the sentences a judge must read (index → what it cites)."""

    scores: CitationScores
    asks: dict[int, SupportInput]


@dataclass(frozen=True)
class SupportVerdicts:
    """The judge's verdicts on the sentences the IDs could not decide, and what they cost."""

    verdicts: dict[int, bool]
    usage: Usage


def fidelity_input(item: GoldenItem, output: AgentOutput) -> FidelityInput | None:
    """The question and what the workflow's rewrite node made of it, for an item without ``must_keep``
    terms (those check the rewrite exactly); None when there is nothing to judge."""
    if item.must_keep:
        return None
    for s in output.stages:
        if _workflow_rewrite(s.node):
            text = rewritten(s)  # type: ignore[arg-type]  # a Stage has the outputs a StageRecord has
            return FidelityInput(item.question, text) if text else None
    return None


def _workflow_rewrite(node: dict) -> bool:
    """A workflow's rewrite node that ran (a pipeline's rewrite step has no node type)."""
    return node.get("role") == "rewrite" and "type" in node and node.get("status") not in ("failed", "exception")


@cache
def _fidelity_step(language: str, max_tokens: int) -> FidelityStep:
    return fidelity_step(language, max_tokens)


def check_fidelity(panel: JudgePanel, inp: FidelityInput) -> FidelityVerdict:
    """The rewrite-fidelity judge on one item, by the panel's model (or heuristic) in its language."""
    max_tokens = max((s.max_tokens for s in panel.steps.values()), default=160)
    return judge_fidelity(panel.llm, _fidelity_step(panel.language, max_tokens), inp)


def citation_check(item: GoldenItem, output: AgentOutput) -> CitationCheck | None:
    """The ID-based part of the citation check of an answer that cites (None for one that does not). Pure."""
    if not output.cite_styles or not output.answered:
        return None
    sentences = cited_sentences(output.cited_answer or output.answer, output.cite_styles)
    contexts = [c.passage_ids for c in output.contexts]
    scores = score_citations(sentences, contexts, item.gt_context_ids, declined=is_refusal(output.answer))
    asks = {
        n: SupportInput(
            sentences[n].text, tuple(output.contexts[c].text for c in sentences[n].cites if 0 <= c < len(contexts))
        )
        for n in scores.undecided
    }
    return CitationCheck(scores, asks)


def check_support(panel: JudgePanel, check: CitationCheck) -> SupportVerdicts:
    """Ask the panel's judge about the sentences the IDs left open (a failed verdict is left out)."""
    verdicts, usage, _ = judge_support(panel.llm, panel.support, check.asks)
    return SupportVerdicts(verdicts, usage)


def citation_figures(check: CitationCheck | None, support: SupportVerdicts | None) -> dict[str, float | None]:
    """The record's citation figures (empty for an answer that does not cite)."""
    if check is None:
        return {}
    s = check.scores
    rate = support_rate(s, support.verdicts if support else {})
    return {
        "validity": s.validity,
        "coverage": s.coverage,
        "precision": s.precision,
        "recall": s.recall,
        "support": rate,
    }


def judge_input(item: GoldenItem, output: AgentOutput) -> JudgeInput:
    """What the judges read: the question, the answer, the GT answer and the retrieved texts."""
    return JudgeInput(item.question, output.answer, item.gt_answer, tuple(c.text for c in output.contexts if c.text))


def item_record(
    item: GoldenItem,
    output: AgentOutput,
    verdicts: dict[str, JudgeRecord],
    judge_usage: dict[str, Usage],
    k: int,
    latency_s: float = 0.0,
    support: SupportVerdicts | None = None,
    fidelity: FidelityVerdict | None = None,
) -> ItemRecord:
    """The record of one item: its retrieval metrics and the judges' verdicts. Pure.

    Recall and precision count the passages the contexts cover; MRR, hit rate, nDCG and
    all-hops rank the contexts themselves (the units the agent returned), so a large unit
    does not push the GT passage it holds down the ranking. ``k`` is the cut-off of the
    rank metrics in units (the version's top_k). An output that did not report its
    retrieval gets no retrieval metrics (``retrieval`` stays empty). ``support``: the judge's verdicts
    on cited sentences the IDs could not decide (:func:`check_support`); ``fidelity``: the
    rewrite-fidelity verdict (:func:`check_fidelity`), kept on the rewrite node's stage.
    """
    if support is not None:
        judge_usage = {**judge_usage, CITATION_SUPPORT: support.usage}
    if fidelity is not None:
        judge_usage = {**judge_usage, FIDELITY_STEP: fidelity.usage}
    record = ItemRecord(
        id=item.id,
        type=item.type,
        question=item.question,
        gt_context_ids=list(item.gt_context_ids),
        gt_answer=item.gt_answer,
        answer=output.answer,
        contexts=[_context(c) for c in output.contexts],
        retrieval=(
            retrieval_scores(passage_groups(output.contexts), item.gt_context_ids, k, item.gt_groups)
            if output.retrieval_reported
            else {}
        ),
        judges=verdicts,
        queries=list(output.queries),
        outline=list(output.outline),
        errors=list(output.errors),
        tags=list(item.tags),
        latency_s=round(latency_s, 3),
        gt_groups=[list(g) for g in item.gt_groups],
        usage={"agent": dict(output.usage), "judge": judge_usage},
        stages=_stages(output, fidelity),
        answered=output.answered,
        history=turns_json(item.history),
        cited_answer=output.cited_answer if output.cite_styles else "",
        citations=citation_figures(citation_check(item, output), support),
        intent=item.intent,
        must_keep=list(item.must_keep),
    )
    record.first_failing = first_failing(record)
    return record


def _stages(output: AgentOutput, fidelity: FidelityVerdict | None) -> list[StageRecord]:
    """The output's stages as records; the fidelity verdict on the first rewrite node that ran."""
    out, verdict = [], fidelity.verdict if fidelity else None
    for s in output.stages:
        node = s.node
        if verdict is not None and _workflow_rewrite(node):
            said = {"fidelity": verdict.score, "fidelity_reason": verdict.reason}
            node, verdict = {**node, **(said if verdict.error is None else {"fidelity_error": verdict.error})}, None
        contexts = [_context(c) for c in s.contexts]
        out.append(StageRecord(s.name, s.kind, s.start_ns, s.end_ns, s.inputs, s.outputs, contexts, node))
    return out


def judges_for(output: AgentOutput, panel: JudgePanel) -> tuple[str, ...]:
    """The panel's judges that can judge ``output``: none without an answer (a failed call, an agent
    that only retrieves); without the judges that read contexts when the reply did not say what it
    retrieved."""
    if not output.answered or output.retrieval_only:
        return ()
    return tuple(n for n in panel.steps if output.retrieval_reported or not JUDGES.get(n).reads_contexts)


def score_item(item: GoldenItem, output: AgentOutput, panel: JudgePanel, k: int, latency_s: float = 0.0) -> ItemRecord:
    """The verdicts of :func:`judges_for` on the output, then its record. Raises
    :class:`~ragtrack.llm.CircuitOpenError` only when the judge endpoint keeps failing."""
    names = judges_for(output, panel)
    verdicts, judge_usage = panel.judge(judge_input(item, output), names) if names else ({}, {})
    check = citation_check(item, output)
    support = check_support(panel, check) if check and check.asks else None
    fidelity = check_fidelity(panel, inp) if (inp := fidelity_input(item, output)) else None
    return item_record(item, output, verdicts, judge_usage, k, latency_s, support, fidelity)


def _context(c: RetrievedContext) -> ContextRecord:
    return ContextRecord(c.unit_id, c.text, list(c.passage_ids), c.score, c.mapping)
