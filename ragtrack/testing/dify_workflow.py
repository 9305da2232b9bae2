"""The workflow behind the loopback Dify server's ``workflow`` and ``advanced-chat`` apps, node by node.

The graph is the one the user's method describes (rewrite → question
classifier → one knowledge base per class → LLM), with Dify's node types and
the titles a Chinese team gives them::

    开始 (start) → 问题改写 (llm) → 意图识别 (question-classifier)
        → 知识检索·<class> (knowledge-retrieval, the chosen class's branch only)
        → 回答生成 (llm) → 结束 (end; a chatflow: 直接回复, answer)

Each node's ``node_started`` / ``node_finished`` events have the fields of
Dify's ``NodeStartStreamResponse`` / ``NodeFinishStreamResponse``
(``api/core/app/entities/task_entities.py``): ``id`` (the execution),
``node_id``, ``node_type``, ``title``, ``index``, ``predecessor_node_id``,
``inputs``, ``process_data``, ``outputs``, ``status``, ``error``,
``elapsed_time``, ``execution_metadata`` (``total_tokens``, ``total_price``,
``currency`` on LLM nodes), ``created_at``, ``finished_at``. A knowledge
retrieval node's ``outputs.result[]`` is what Dify's KnowledgeRetrievalNode
builds: ``{metadata: {_source, dataset_id, dataset_name, document_id,
document_name, segment_id, retriever_from: "workflow", score, position, …},
title, content}``, best score first; an LLM node's outputs are ``{text, usage,
finish_reason}``; a question classifier's ``{class_name, class_id}``.

Every run is kept in :attr:`WorkflowRun` form (``DifyServer.workflow_runs``):
what each node received and did, the faults it met. Tests compute the node
metrics they expect from that record, never from the reply.

Planted faults (``DifyServer.plant(question, *faults)``), per question:
``drop_term:<term>`` (the rewrite loses the term), ``misroute`` (the classifier
picks the next class), ``empty_retrieval`` (the knowledge base finds nothing),
``unfaithful`` (the answer says what no retrieved segment says) and
``fail:<node title>`` (that node fails: status ``failed``, the run stops, the
workflow finishes ``failed`` with the node's error, as Dify's graph engine does).
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from ragtrack.testing.knowledge import Knowledge, Segment, extractive_answer, stable_id

REWRITE, INTENT, ANSWER = "问题改写", "意图识别", "回答生成"
UNFAITHFUL = "The default is 42, set in settings.yaml."  # in no document of any knowledge base
NODE_FAULTS = ("drop_term", "misroute", "empty_retrieval", "unfaithful", "fail")


@dataclass(frozen=True)
class Route:
    """One class of the question classifier and the knowledge base its branch retrieves from."""

    name: str
    documents: tuple[str, ...]  # the knowledge base: documents whose name starts with one of these

    @property
    def title(self) -> str:
        return f"知识检索·{self.name}"

    def holds(self, segment: Segment) -> bool:
        return any(segment.document.name.startswith(d) for d in self.documents)


@dataclass
class NodeRun:
    """One node as the stand-in ran it (its own record, for tests)."""

    node_id: str
    node_type: str
    title: str
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    status: str = "succeeded"
    error: str | None = None
    tokens: int = 0


@dataclass
class WorkflowRun:
    """What the app did with one question: the rewritten query, the class, what each retrieval
    node returned (segment IDs), the answer, the node that failed and the faults it met."""

    question: str
    faults: tuple[str, ...]
    query: str = ""
    intent: str = ""
    retrieved: dict[str, list[str]] = field(default_factory=dict)  # retrieval node title → segment IDs
    answer: str = ""
    failed: str | None = None  # the title of the node that failed
    nodes: list[NodeRun] = field(default_factory=list)


def parse_fault(text: str) -> str:
    kind = text.partition(":")[0]
    if kind not in NODE_FAULTS or (kind in ("drop_term", "fail") and ":" not in text):
        raise ValueError(
            f"unknown node fault {text!r}; expected drop_term:<term>, misroute, empty_retrieval, "
            "unfaithful or fail:<node title>"
        )
    return text


class Workflow:
    """The app's graph over a knowledge base split into one knowledge base per class."""

    def __init__(self, knowledge: Knowledge, routes: tuple[Route, ...], dataset_name: str, top_k: int, chat: bool):
        self.knowledge, self.routes, self.top_k, self.chat = knowledge, routes, top_k, chat
        self.llm_latency_s = 0.0  # how long each LLM node takes (a real model takes seconds; benchmarks set it)
        self.dataset_name = dataset_name
        self.workflow_id = str(stable_id("workflow", dataset_name, "chat" if chat else "workflow"))

    def node_id(self, name: str) -> str:
        """Dify's node IDs are creation timestamps in milliseconds: stable ones, per node."""
        return str(1718000000000 + int(stable_id("node", name).int % 10**6))

    def run(self, question: str, faults: tuple[str, ...]) -> WorkflowRun:
        """Run the graph on one question; the record says what each node did."""
        run = WorkflowRun(question, faults)
        failing = {f.partition(":")[2] for f in faults if f.startswith("fail:")}

        def node(node_type: str, title: str, inputs: dict, outputs: dict, tokens: int = 0) -> bool:
            """Record a node; False when a planted fault fails it (the run stops there)."""
            if title in failing:
                error = f"[loopback] Error: node {title} failed: the model provider answered 500"
                run.nodes.append(NodeRun(self.node_id(title), node_type, title, inputs, {}, "failed", error))
                run.failed = title
                return False
            run.nodes.append(NodeRun(self.node_id(title), node_type, title, inputs, outputs, tokens=tokens))
            if tokens and self.llm_latency_s:
                time.sleep(self.llm_latency_s)
            return True

        start_outputs = {"sys.query": question} if self.chat else {"query": question}
        if not node("start", "开始", dict(start_outputs), dict(start_outputs)):
            return run
        run.query = rewrite(question, [f.partition(":")[2] for f in faults if f.startswith("drop_term:")])
        if not node("llm", REWRITE, {"query": question}, llm_outputs(run.query, question), tokens(question, run.query)):
            return run
        chosen = self.classify(run.query)
        if "misroute" in faults:
            chosen = self.routes[(self.routes.index(chosen) + 1) % len(self.routes)]
        run.intent = chosen.name
        classified = {"class_name": chosen.name, "class_id": str(self.routes.index(chosen) + 1)}
        if not node("question-classifier", INTENT, {"query": run.query}, classified, tokens(run.query, chosen.name)):
            return run
        hits = [] if "empty_retrieval" in faults else self.retrieve(chosen, run.query)
        run.retrieved[chosen.title] = [s.id for s, _ in hits]
        result = [self.source(s, score, n) for n, (s, score) in enumerate(hits, start=1)]
        if not node("knowledge-retrieval", chosen.title, {"query": run.query}, {"result": result}):
            return run
        segments = [s for s, _ in hits]
        run.answer = UNFAITHFUL if "unfaithful" in faults else extractive_answer(question, segments)
        context = "\n".join(s.text for s in segments)
        if not node(
            "llm", ANSWER, {"#context#": context}, llm_outputs(run.answer, context), tokens(context, run.answer)
        ):
            return run
        if self.chat:
            node("answer", "直接回复", {}, {"answer": run.answer})
        else:
            node("end", "结束", {"answer": run.answer}, {"answer": run.answer, "contexts": result})
        return run

    def classify(self, query: str) -> Route:
        """The class whose knowledge base holds the query's best segment (the first class on a tie)."""
        for segment, _ in self.knowledge.search(query, len(self.knowledge.segments)):
            for route in self.routes:
                if route.holds(segment):
                    return route
        return self.routes[0]

    def retrieve(self, route: Route, query: str) -> list[tuple[Segment, float]]:
        """The route's knowledge base alone: its ``top_k`` best segments, scores scaled to (0, 1]."""
        ranked = [(s, score) for s, score in self.knowledge.search(query, len(self.knowledge.segments))]
        mine = [(s, score) for s, score in ranked if route.holds(s) and score > 0][: self.top_k]
        top = mine[0][1] if mine else 1.0
        return [(s, round(score / top, 4)) for s, score in mine]

    def source(self, s: Segment, score: float, position: int) -> dict[str, Any]:
        """One entry of a knowledge retrieval node's ``outputs.result`` (KnowledgeRetrievalNode's shape)."""
        dataset = f"{self.dataset_name}-{next(r.name for r in self.routes if r.holds(s))}"
        return {
            "metadata": {
                "_source": "knowledge",
                "dataset_id": str(stable_id("dataset", dataset)),
                "dataset_name": dataset,
                "document_id": s.document.id,
                "document_name": s.document.name,
                "document_data_source_type": "upload_file",
                "segment_id": s.id,
                "retriever_from": "workflow",
                "score": score,
                "segment_hit_count": 0,
                "segment_word_count": len(s.text),
                "segment_position": s.position,
                "segment_index_node_hash": str(stable_id("hash", s.text)).replace("-", ""),
                "position": position,
            },
            "title": s.document.name,
            "content": s.text,
        }

    def events(self, run: WorkflowRun, task_id: str, message_id: str | None, answer_output: str) -> list[dict]:
        """The stream Dify sends for the run: ``workflow_started``, each node's ``node_started`` and
        ``node_finished``, the answer (``text_chunk`` in a workflow; ``message`` chunks and
        ``message_end`` in a chatflow), ``workflow_finished``."""
        run_id, now = str(uuid.uuid4()), int(time.time())
        head = {"task_id": task_id, "workflow_run_id": run_id}
        chat = {"conversation_id": str(uuid.uuid4()), "message_id": message_id} if message_id else {}
        events: list[dict] = [
            {
                "event": "workflow_started",
                **head,
                **chat,
                "data": {
                    "id": run_id,
                    "workflow_id": self.workflow_id,
                    "sequence_number": 1,
                    "inputs": {"query": run.question} if not self.chat else {"sys.query": run.question},
                    "created_at": now,
                },
            }
        ]
        previous = None
        for index, n in enumerate(run.nodes, start=1):
            execution = str(uuid.uuid4())
            common = {
                "id": execution,
                "node_id": n.node_id,
                "node_type": n.node_type,
                "title": n.title,
                "index": index,
                "predecessor_node_id": previous,
                "inputs": n.inputs,
                "created_at": now,
            }
            events.append({"event": "node_started", **head, **chat, "data": {**common, "extras": {}}})
            if n.node_type == "answer" and message_id:
                words = run.answer.split(" ")
                events += [
                    {
                        "event": "message",
                        **head,
                        **chat,
                        "id": message_id,
                        "answer": w + (" " if i < len(words) - 1 else ""),
                        "created_at": now,
                    }
                    for i, w in enumerate(words)
                ]
            elif n.node_type == "end" and n.status == "succeeded":
                events.append(
                    {
                        "event": "text_chunk",
                        **head,
                        "data": {"text": run.answer, "from_variable_selector": [n.node_id, answer_output]},
                    }
                )
            metadata = None
            if n.tokens:
                metadata = {"total_tokens": n.tokens, "total_price": f"{n.tokens * 0.000002:.7f}", "currency": "USD"}
            events.append(
                {
                    "event": "node_finished",
                    **head,
                    **chat,
                    "data": {
                        **common,
                        "process_data": None,
                        "outputs": n.outputs if n.status == "succeeded" else None,
                        "status": n.status,
                        "error": n.error,
                        "elapsed_time": 0.01 * index,
                        "execution_metadata": metadata,
                        "finished_at": now,
                        "files": [],
                    },
                }
            )
            previous = n.node_id
        total = sum(n.tokens for n in run.nodes)
        outputs = self.outputs(run, answer_output)
        if message_id and run.failed is None:
            metadata = {"usage": {"total_tokens": total, "total_price": f"{total * 0.000002:.7f}", "currency": "USD"}}
            result = next((n.outputs["result"] for n in run.nodes if n.node_type == "knowledge-retrieval"), [])
            metadata["retriever_resources"] = [{**r["metadata"], "content": r["content"]} for r in result]
            events.append({"event": "message_end", **head, **chat, "id": message_id, "metadata": metadata, "files": []})
        events.append(
            {
                "event": "workflow_finished",
                **head,
                **chat,
                "data": {
                    "id": run_id,
                    "workflow_id": self.workflow_id,
                    "sequence_number": 1,
                    "status": "failed" if run.failed else "succeeded",
                    "outputs": outputs,
                    "error": next((n.error for n in run.nodes if n.error), None),
                    "elapsed_time": round(0.01 * len(run.nodes), 3),
                    "total_tokens": total,
                    "total_steps": len(run.nodes),
                    "created_by": {"id": str(stable_id("end-user")), "user": "ragtrack"},
                    "created_at": now,
                    "finished_at": now,
                    "files": [],
                },
            }
        )
        return events

    def outputs(self, run: WorkflowRun, answer_output: str) -> dict[str, Any] | None:
        """The workflow's outputs: the End node's variables (``answer_output`` names the answer's)."""
        if run.failed:
            return None
        end = run.nodes[-1].outputs
        if self.chat:
            return {"answer": end["answer"]}
        return {answer_output: end["answer"], "contexts": end["contexts"]}


def rewrite(question: str, dropped: list[str]) -> str:
    """The rewrite LLM's output: the question without its closing punctuation, whitespace collapsed,
    minus any planted lost term."""
    query = re.sub(r"\s+", " ", question).strip().rstrip("?？。.!！")
    for term in dropped:
        query = re.sub(re.escape(term), "", query, flags=re.IGNORECASE)
    return re.sub(r"\s+", " ", query).strip()


def tokens(prompt: str, output: str) -> int:
    """What an LLM node is billed: four characters a token, as the stand-in's chat replies count."""
    return max(1, len(prompt) // 4) + max(1, len(output) // 4)


def llm_outputs(text: str, prompt: str) -> dict[str, Any]:
    """An LLM node's outputs, as Dify's LLMNode writes them."""
    return {
        "text": text,
        "usage": {
            "prompt_tokens": max(1, len(prompt) // 4),
            "completion_tokens": max(1, len(text) // 4),
            "total_tokens": tokens(prompt, text),
            "currency": "USD",
        },
        "finish_reason": "stop",
    }
