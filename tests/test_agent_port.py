"""The agent port: a new kind of agent is one class plus one registry line, and then it is
evaluated, compared, promoted and served from the registry exactly like a built-in version."""

from __future__ import annotations

from typing import Literal

import mlflow
import pytest

from ragtrack.agent import AGENT_KINDS, AgentKind, AgentOutput, AgentSpec, AgentTable, BaseAgent, RetrievedContext
from ragtrack.api import compare, evaluate, promote


# ---- the example agent: ten lines --------------------------------------------------------
class KeywordTable(AgentTable):
    kind: Literal["keyword"]
    top_k: int = 3


class KeywordSpec(AgentSpec):
    agent: KeywordTable


class KeywordAgent(BaseAgent):
    """Ranks passages by the words they share with the question; answers with the best one's last line."""

    def answer(self, question: str) -> AgentOutput:
        words = set(question.lower().split())
        ranked = sorted(self.ctx.corpus.passages.values(), key=lambda p: -len(words & set(p.text.lower().split())))
        top = ranked[: self.spec.spec.agent.top_k]
        return AgentOutput(top[0].text.split("\n")[-1], [RetrievedContext(p.id, p.text, (p.id,)) for p in top])


# ------------------------------------------------------------------------------------------


@pytest.fixture
def keyword_kind():
    AGENT_KINDS.add("keyword", AgentKind("keyword", KeywordSpec, KeywordAgent))  # the one registry line
    yield
    AGENT_KINDS.remove("keyword")


def test_a_new_agent_kind_is_evaluated_compared_and_promoted_like_v1(project, keyword_kind):
    (project / "pipelines" / "kw.toml").write_text(
        '[version]\nname = "kw"\ndescription = "keyword overlap"\n\n'
        '[agent]\nkind = "keyword"\ntop_k = 2\n\n[declared]\nretriever = "word overlap"\n'
    )
    v1 = evaluate("v1", root=project)
    kw = evaluate("kw", root=project)
    assert kw.complete and len(kw.records) == 5
    assert kw.params["agent_kind"] == "keyword" and kw.params["spec.declared.retriever"] == "word overlap"
    first = kw.records[0]
    assert len(first.contexts) == 2 and first.retrieval["context_recall"] in (0.0, 0.5, 1.0)

    report = compare("v1", "kw", root=project)
    assert {r.metric for r in report.rows} >= {"context_recall", "correctness"} and report.run_id

    assert promote("v1", root=project).promoted
    decision = promote("kw", root=project)
    assert decision.champion == "v1" and decision.figures["paired_items"] == 5
    expected = (
        kw.metrics["correctness"] > v1.metrics["correctness"]
        and kw.metrics["groundedness"] >= v1.metrics["groundedness"]
    )
    assert decision.promoted == expected, decision.reasons

    # It reports no stages: its trace per item is one span, for the whole call, with the contexts it returned.
    [stage] = first.stages
    assert (stage.name, stage.kind) == ("answer", "agent") and stage.start_ns <= stage.end_ns
    assert [c.unit_id for c in stage.contexts] == first.retrieved_unit_ids
    [trace] = mlflow.search_traces(
        run_id=kw.run_id, filter_string=f"tags.`ragtrack.item_id` = '{first.id}'", return_type="list"
    )
    [span] = trace.data.spans
    assert span.span_type == "AGENT" and (span.start_time_ns, span.end_time_ns) == (stage.start_ns, stage.end_ns)

    # The registered model of the new kind is a working pyfunc too.
    served = mlflow.pyfunc.load_model(f"models:/rag-agent/{kw.model_version}")
    [out] = served.predict(["What is the default cfg value?"])
    assert out["answer"] and len(out["retrieved_ids"]) == 2


def test_unknown_agent_kinds_and_unknown_keys_are_errors_with_their_path(project, keyword_kind):
    from ragtrack.errors import InputError
    from ragtrack.spec import load_spec

    (project / "pipelines" / "bad.toml").write_text('[agent]\nkind = "keyword"\ntopk = 2\n')
    with pytest.raises(InputError) as e:
        load_spec("bad", project / "pipelines")
    assert "bad.toml:3: agent.topk: unknown key (did you mean 'top_k'?)" in str(e.value)


def test_stages_name_a_registered_kind():
    from ragtrack.agent import Stage
    from ragtrack.registry import UnknownNameError

    assert Stage("retrieve", "retriever", 1, 2).kind == "retriever"
    with pytest.raises(UnknownNameError, match="unknown stage kind 'search'; expected one of: retriever"):
        Stage("retrieve", "search", 1, 2)
