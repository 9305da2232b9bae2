"""One scoring path: (golden item, agent output, judges) → item record.

``ragtrack eval``, the ``mlflow.model_evaluator`` plugin and judge
calibration all score through here, so a metric means the same thing
wherever it is computed. :func:`score_item` does it in one call; the eval
runner, which schedules each judge call separately so an endpoint stays busy,
uses the two halves: :func:`judge_input` and :func:`item_record`.
"""

from __future__ import annotations

from ragtrack.agent import AgentOutput, RetrievedContext
from ragtrack.evaluation.judges import JUDGES, JudgeInput, JudgePanel
from ragtrack.evaluation.nodes import first_failing
from ragtrack.evaluation.retrieval_metrics import retrieval_scores
from ragtrack.golden import GoldenItem
from ragtrack.llm.accounting import Usage
from ragtrack.records import ContextRecord, ItemRecord, JudgeRecord, StageRecord, passage_groups


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
) -> ItemRecord:
    """The record of one item: its retrieval metrics and the judges' verdicts. Pure.

    Recall and precision count the passages the contexts cover; MRR, hit rate, nDCG and
    all-hops rank the contexts themselves (the units the agent returned), so a large unit
    does not push the GT passage it holds down the ranking. ``k`` is the cut-off of the
    rank metrics in units (the version's top_k). An output that did not report its
    retrieval gets no retrieval metrics (``retrieval`` stays empty).
    """
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
        stages=[
            StageRecord(
                s.name, s.kind, s.start_ns, s.end_ns, s.inputs, s.outputs, [_context(c) for c in s.contexts], s.node
            )
            for s in output.stages
        ],
        answered=output.answered,
        intent=item.intent,
        must_keep=list(item.must_keep),
    )
    record.first_failing = first_failing(record)
    return record


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
    return item_record(item, output, verdicts, judge_usage, k, latency_s)


def _context(c: RetrievedContext) -> ContextRecord:
    return ContextRecord(c.unit_id, c.text, list(c.passage_ids), c.score, c.mapping)
