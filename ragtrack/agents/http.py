"""Any JSON HTTP endpoint as an agent version (kind ``http``).

    [agent]
    kind = "http"
    url = "http://127.0.0.1:9000/ask"
    method = "POST"                                         # POST: body as JSON; GET: body as query
    headers = { Authorization = "Bearer ${MY_AGENT_KEY}" }  # ${VAR}: from the environment, never logged
    body = { question = "{question}", top_k = 5 }           # "{question}" in any string is the question;
                                                            # a value "{history}" is a follow-up's earlier turns
    answer_path = "data.answer"                             # dotted paths; a number indexes a list
    contexts_path = "data.sources"
    context_id = "chunk_id"                                 # each relative to one context ("" = itself)
    context_text = "text"
    context_score = "score"

A follow-up item's earlier turns (``[{"role": "user" | "assistant", "content": …}, …]``) go where the
body says ``"{history}"``, or else as a top-level ``history`` key of a POST body (a JSON string
parameter of a GET). A lone question sends no history.

A reply without the contexts list is a per-item error: what was retrieved is
unknown. An empty list is an answer that retrieved nothing.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from pydantic import field_validator

from ragtrack.agent import AgentContext, AgentKind, turns_json
from ragtrack.agents.base import (
    AgentCallError,
    EndpointTable,
    ExternalAgent,
    ExternalSpec,
    Reply,
    check_url,
    declared_files,
    number,
    read_secret,
)
from ragtrack.agents.endpoint import Endpoint, EndpointError
from ragtrack.agents.mapping import PlatformContext
from ragtrack.llm.accounting import Usage
from ragtrack.secrets import secret_digest

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ragtrack.golden import Turn
    from ragtrack.spec import LoadedSpec

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_MISSING = object()


class HttpTable(EndpointTable):
    kind: Literal["http"]
    url: str
    method: Literal["POST", "GET"] = "POST"
    headers: dict[str, str] = {}
    body: dict[str, Any] = {"question": "{question}"}
    answer_path: str = "answer"
    contexts_path: str = "contexts"
    context_id: str = "id"
    context_text: str = "text"
    context_score: str | None = "score"
    context_doc: str | None = None  # the context's document (a hint when its text occurs in two documents)

    @field_validator("url")
    @classmethod
    def _clean_url(cls, value: str) -> str:
        return check_url(value)


class HttpSpec(ExternalSpec):
    agent: HttpTable


def dig(data: Any, path: str) -> Any:
    """The value at a dotted path (``data.sources.0.text``; ``""`` is ``data`` itself), or ``_MISSING``."""
    for part in path.split(".") if path else ():
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and part.lstrip("-").isdigit() and -len(data) <= int(part) < len(data):
            data = data[int(part)]
        else:
            return _MISSING
    return data


HISTORY = "{history}"


def fill(template: Any, question: str, history: list[dict[str, str]] | None = None) -> Any:
    """The body template with ``{question}`` replaced in every string (JSON-safe: no text splicing) and
    a value that is exactly ``{history}`` replaced by the turns (a list, ``[]`` for a lone question)."""
    if template == HISTORY:
        return history or []
    if isinstance(template, str):
        return template.replace("{question}", question)
    if isinstance(template, dict):
        return {k: fill(v, question, history) for k, v in template.items()}
    if isinstance(template, list):
        return [fill(v, question, history) for v in template]
    return template


def places_history(template: Any) -> bool:
    """Does the body template say where the turns go?"""
    if template == HISTORY:
        return True
    values = template.values() if isinstance(template, dict) else template if isinstance(template, list) else ()
    return any(places_history(v) for v in values)


class HttpAgent(ExternalAgent):
    def __init__(self, spec: LoadedSpec, ctx: AgentContext):
        super().__init__(spec, ctx)
        t: HttpTable = self.table
        headers = {
            name: _ENV.sub(lambda m, name=name: read_secret(spec, m.group(1), f"agent.headers.{name}"), value)
            for name, value in t.headers.items()
        }
        if headers != t.headers:  # a key in a header may pick what answers (a gateway's tenant, an app)
            self.identity = replace(
                self.identity, runtime=secret_digest(*sorted(f"{k}={v}" for k, v in headers.items()))
            )
        self.endpoint = Endpoint(
            t.url,
            headers=headers,
            timeout_s=self.timeout_s,
            max_concurrency=t.max_concurrency,
            min_concurrency=t.concurrency_floor,
            memory=self.endpoint_memory,
            circuit=self.circuit,
        )

    def ask(self, question: str, usage: Usage, history: Sequence[Turn] = ()) -> Reply:
        t: HttpTable = self.table
        turns = turns_json(history)
        payload = fill(t.body, question, turns)
        if turns and not places_history(t.body):
            payload["history"] = json.dumps(turns, ensure_ascii=False) if t.method == "GET" else turns
        try:
            if t.method == "GET":
                reply = self.endpoint.request("GET", "", params=payload, usage=usage, step="http")
            else:
                reply = self.endpoint.request("POST", "", json_body=payload, usage=usage, step="http")
        except EndpointError as e:
            raise AgentCallError(str(e)) from None
        answer = dig(reply, t.answer_path)
        if not isinstance(answer, str):
            raise AgentCallError(f"the reply has no text at answer_path {t.answer_path!r}")
        contexts = dig(reply, t.contexts_path)
        if not isinstance(contexts, list):
            return Reply(answer, None, f"the reply has no list at contexts_path {t.contexts_path!r}")
        return Reply(answer, [self._context(c, n) for n, c in enumerate(contexts, start=1)])

    def _context(self, item: Any, rank: int) -> PlatformContext:
        t: HttpTable = self.table

        def value_at(path: str | None) -> Any:
            value = dig(item, path) if path is not None else _MISSING
            return None if value is _MISSING else value

        text, unit_id, doc = value_at(t.context_text), value_at(t.context_id), value_at(t.context_doc)
        return PlatformContext(
            id=str(unit_id) if unit_id is not None else f"context@{rank}",
            text=str(text) if text is not None else "",
            doc_id=str(doc or ""),
            doc_name=str(doc or ""),
            score=number(value_at(t.context_score)),
        )

    def describe(self) -> dict[str, str]:
        t: HttpTable = self.table
        return {**super().describe(), "url": t.url, "method": t.method}


KIND = AgentKind("http", HttpSpec, HttpAgent, declared_files)
