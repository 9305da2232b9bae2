"""What every external agent kind shares: common spec keys, the reply, the response cache, accounting.

A kind implements :meth:`ExternalAgent.ask` — one question to its platform,
read into a :class:`Reply` — and :meth:`ExternalAgent.describe`. The rest is
here, once: contexts mapped to canonical passages (:mod:`.mapping`), replies
cached by (agent identity, question) under the project's cache folder
(``--no-cache`` skips reading it), a reply that says nothing about retrieval
turned into a per-item error, and a run of failed calls stopping the run.

The response cache assumes what the spec assumes: an unchanged spec is an
unchanged agent. After changing the app on its platform, change the spec (it
is a new version: say what changed in ``[declared]``) or pass ``--no-cache``.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from pydantic import Field, field_validator, model_validator

from ragtrack.agent import AgentContext, AgentOutput, AgentSpec, AgentTable, BaseAgent, Stage, turns_json
from ragtrack.agents.endpoint import Check, EndpointError, bearer_endpoint, standard_check
from ragtrack.agents.mapping import ContextMapper, IdTable, PlatformContext, id_table_path
from ragtrack.caches import cache_path
from ragtrack.citation_markers import strip_markers
from ragtrack.errors import InputError, Problem, RagtrackError
from ragtrack.llm.accounting import Usage
from ragtrack.llm.cache import JsonCache
from ragtrack.llm.client import Circuit, RetryPolicy
from ragtrack.llm.concurrency import bounds_problem
from ragtrack.llm.memory import shared_memory
from ragtrack.production.fields import api_key
from ragtrack.secrets import EnvName, declare, redact, secret_digest
from ragtrack.tomlfile import file_key_line

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ragtrack.agents.endpoint import Endpoint
    from ragtrack.agents.workflow import Node
    from ragtrack.golden import Turn
    from ragtrack.spec import LoadedSpec

#: ``[declared] prompt_file``: a prompt file named by the spec (confined to the project, hashed, logged).
PROMPT_FILE = "declared.prompt_file"
_SECRET_PARAM = ("key", "token", "secret", "password", "signature", "sig")


def check_url(url: str) -> str:
    """An http(s) URL that carries no credentials: it is logged as a param."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"expected an http:// or https:// URL, got {url!r}")
    if "@" in parts.netloc:
        raise ValueError("the URL holds credentials; put the key in an environment variable (api_key_env)")
    secret = [k for k, _ in parse_qsl(parts.query) if any(s in k.lower() for s in _SECRET_PARAM)]
    if secret:
        raise ValueError(f"the URL's query holds {secret[0]!r}; pass secrets through environment variables")
    return url


class EndpointTable(AgentTable):
    """Keys of every kind that calls an HTTP endpoint."""

    timeout_s: float | None = Field(default=None, gt=0)  # default: [eval] timeout_s of ragtrack.toml
    max_concurrency: int = Field(default=4, gt=0)  # ceiling; the adaptive limit starts at 2
    # A floor the user knows the endpoint serves (= max_concurrency: a fixed pool). Left out of the
    # spec's dump while unset, so adding this key changed no existing spec's hash.
    min_concurrency: int | None = Field(default=None, gt=0, exclude_if=lambda v: v is None)

    @property
    def concurrency_floor(self) -> int:
        return self.min_concurrency or 1

    @model_validator(mode="after")
    def _floor_not_above_ceiling(self) -> EndpointTable:
        if problem := bounds_problem(self.concurrency_floor, self.max_concurrency):
            raise ValueError(problem)
        return self


class PlatformTable(EndpointTable):
    """A platform app: where it is and which environment variable holds its key (never the key)."""

    base_url: str
    api_key_env: EnvName

    @field_validator("base_url")
    @classmethod
    def _clean_url(cls, value: str) -> str:
        return check_url(value).rstrip("/")


class ExternalSpec(AgentSpec):
    """``[version]``, the kind's ``[agent]`` table, and ``[declared]``: what the user says the app does
    (chunking, top_k, rerank model, ``prompt`` text or ``prompt_file``), logged as params."""

    @field_validator("declared")
    @classmethod
    def _prompt_file_is_a_path(cls, declared: dict) -> dict:
        if "prompt_file" in declared and not isinstance(declared["prompt_file"], str):
            raise ValueError("prompt_file must be a path (relative to the spec file)")
        return declared


def declared_files(spec: ExternalSpec) -> dict[str, str]:
    """The files a spec names: its declared prompt file, if any (see :data:`PROMPT_FILE`)."""
    path = spec.declared.get("prompt_file")
    return {PROMPT_FILE: str(path)} if path else {}


def spec_problem(spec: LoadedSpec, field_path: str, message: str) -> InputError:
    """A problem with the spec's ``field_path`` (dotted, e.g. ``agent.target``), at its line in the file."""
    return InputError([Problem(spec.path, message, file_key_line(spec.path, field_path.split(".")), field_path)])


def read_secret(spec: LoadedSpec, env: str, field_path: str = "agent.api_key_env") -> str:
    """The value of the environment variable ``env`` (declared a secret first, so it is redacted everywhere)."""
    declare(env)
    value = os.environ.get(env, "")
    if not value:
        raise spec_problem(spec, field_path, f"environment variable {env} is not set (it holds the key)")
    try:
        return api_key(value, env)
    except ValueError as e:
        raise spec_problem(spec, field_path, str(e)) from None


@dataclass
class Reply:
    """One answer as a platform gave it, before mapping: plain data, cached as JSON."""

    answer: str
    contexts: list[PlatformContext] | None  # in rank order; None: the reply did not say what was retrieved
    problem: str = ""  # why ``contexts`` is None, in words a user can act on
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    nodes: list[Node] = field(default_factory=list)  # a workflow's nodes as they ran (see .workflow)
    failed: bool = False  # a workflow run that failed (``problem`` names the node): there is no answer

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict | None) -> Reply | None:
        """A cached reply, or None when there is none (or it was written in another layout)."""
        if data is None:
            return None
        from ragtrack.agents.workflow import Node  # it reads replies with base's helpers: imported late

        try:
            contexts = [PlatformContext(**c) for c in data["contexts"]]
            nodes = [Node.from_json(n) for n in data.get("nodes", [])]
            return cls(**{**data, "contexts": contexts, "nodes": nodes})
        except (KeyError, TypeError):
            return None


class AgentCallError(Exception):
    """No answer came: the endpoint failed after retries, the callable raised, or the reply could not
    be read (a configuration mistake as often as not: it counts towards stopping the run early)."""


class ExternalAgent(BaseAgent):
    """Base of every external kind: subclass it, set :attr:`endpoint` if it has one, write ``ask``."""

    endpoint: Endpoint | None = None

    #: The agent retrieves and does not answer (a platform's ``retrieval_only``): nothing to judge.
    retrieves_only: bool = False

    def __init__(self, spec: LoadedSpec, ctx: AgentContext):
        super().__init__(spec, ctx)
        self.table = spec.spec.agent
        self.max_concurrency = self.table.max_concurrency
        self.id_table = IdTable.load(id_table_path(ctx.corpus.source), ctx.corpus)
        self.mapper = ContextMapper(ctx.corpus, ctx.min_overlap, self.id_table)
        self.cache = JsonCache(cache_path(ctx.cache_dir, "agents"))
        self.endpoint_memory = shared_memory(ctx.cache_dir / "endpoints.json")
        self.circuit = Circuit(RetryPolicy().max_consecutive_failures, f"{spec.kind} calls", spec.name)

    def ask(self, question: str, usage: Usage, history: Sequence[Turn] = ()) -> Reply:
        """Ask the agent once (after replaying ``history`` where the platform keeps conversations);
        raises :class:`AgentCallError` when it cannot be asked."""
        raise NotImplementedError

    def cache_identity(self) -> str:
        """What the cached replies belong to: the spec hash and the runtime identity (the key's digest);
        a kind may add what else changes answers."""
        return ":".join(filter(None, (self.identity.hash, self.identity.runtime)))

    @property
    def timeout_s(self) -> float:
        return self.table.timeout_s or self.ctx.config.eval.timeout_s

    @property
    def peak_in_flight(self) -> int:
        return self.endpoint.limiter.peak_in_flight if self.endpoint else 0

    def answer(self, question: str, history: Sequence[Turn] = ()) -> AgentOutput:
        usage = Usage()
        # A follow-up's reply depends on the turns before it (a lone question keeps the key it always had).
        asked = [question, *([turns_json(history)] if history else [])]
        key = hashlib.sha256(json.dumps([self.spec.kind, self.cache_identity(), *asked]).encode()).hexdigest()
        reply = Reply.from_json(self.cache.get_json(key)) if self.ctx.use_cache else None
        if reply is not None:
            usage.cached += 1
            # It answered this once: failures of the items between are not "in a row" (a re-run asks only
            # the items that failed before, and would stop on eight of them with the agent up).
            self.circuit.success()
        else:
            self.circuit.check()  # after a run of failures, stop instead of asking (CircuitOpenError)
            try:
                reply = self.ask(question, usage, history)
            except AgentCallError as e:
                usage.failed += 1
                problem = redact(f"{self.spec.kind}: {e}")
                self.circuit.failure(problem)
                return AgentOutput(
                    "", [], errors=[problem], usage={self.spec.kind: usage}, retrieval_reported=False, answered=False
                )
            self.circuit.success()
            # An app may echo what it was sent: nothing it says is recorded or cached with a key in it.
            reply.answer = redact(reply.answer)
            if reply.contexts is not None:
                reply.contexts = [replace(c, text=redact(c.text)) for c in reply.contexts]
            usage.tokens_in += reply.tokens_in
            usage.tokens_out += reply.tokens_out
            usage.cost_usd += reply.cost_usd
            if reply.contexts is not None and not reply.failed:  # kept only when complete: the app may get fixed
                self.cache.put_json(key, reply.to_json())
        only = self.retrieves_only
        # An answer with citation markers: scored as written, shown and judged without them.
        styles = self.table.cite_markers
        cited = {"cite_styles": styles, "cited_answer": reply.answer} if styles else {}
        answer = strip_markers(reply.answer, styles) if styles else reply.answer
        roles = self.node_roles(reply) if reply.nodes else {}
        stages = [self._stage(n, roles.get(n.title)) for n in reply.nodes]
        if reply.failed:  # a workflow node failed: a per-item error naming it, and what ran before it
            known = reply.contexts is not None
            return AgentOutput(
                "",
                [self.mapper.map(c) for c in reply.contexts or []],
                errors=[redact(f"{self.spec.kind}: {reply.problem}")],
                usage={self.spec.kind: usage},
                retrieval_reported=known,
                stages=stages,
                answered=False,
                **cited,
            )
        if reply.contexts is None:
            errors = [redact(f"{self.spec.kind}: {reply.problem}")]
            return AgentOutput(
                answer,
                [],
                errors=errors,
                usage={self.spec.kind: usage},
                retrieval_reported=False,
                retrieval_only=only,
                stages=stages,
                **cited,
            )
        contexts = [self.mapper.map(c) for c in reply.contexts]
        return AgentOutput(answer, contexts, usage={self.spec.kind: usage}, retrieval_only=only, stages=stages, **cited)

    def node_roles(self, reply: Reply) -> dict[str, tuple[str, str]]:
        """Node title → (role, why) for a reply's workflow nodes (a kind with workflows says)."""
        return {}

    def _stage(self, node: Node, role: tuple[str, str] | None) -> Stage:
        """A workflow node as a stage of the item's trace, its retrieved segments mapped to passages."""
        contexts = tuple(self.mapper.map(c) for c in node.contexts or [])
        outputs = {k: redact(v) if isinstance(v, str) else v for k, v in node.outputs.items()}
        return Stage(
            node.title, node.kind, node.start_ns, node.end_ns, node.inputs, outputs, contexts, node.described(role)
        )

    def describe(self) -> dict[str, str]:
        """Params every external version logs: how contexts are mapped, and the declared prompt's hash."""
        out = {
            "platform": self.spec.kind,
            "id_table": self.id_table.path if self.id_table else "none (contexts mapped by text)",
        }
        if self.id_table:
            out["id_table_entries"] = str(len(self.id_table.segments))
            out["id_table_hash"] = self.id_table.digest
        prompt = self.spec.files.get(PROMPT_FILE) or self.spec.spec.declared.get("prompt")
        if isinstance(prompt, str) and prompt:
            out["prompt_hash"] = hashlib.sha256(prompt.encode()).hexdigest()[:12]
        return out


class PlatformAgent(ExternalAgent):
    """An app on a platform (Dify, RAGFlow) reached with a bearer key: subclass it, write ``call``.

    ``check`` reads the platform's error shapes (see :mod:`.endpoint`); a call that fails
    after every retry, or is refused, becomes :class:`AgentCallError`.
    """

    check: Check = staticmethod(standard_check)

    def __init__(self, spec: LoadedSpec, ctx: AgentContext):
        super().__init__(spec, ctx)
        key = read_secret(spec, self.table.api_key_env)
        self.identity = replace(self.identity, runtime=secret_digest(key))  # the key picks the app
        self.endpoint = bearer_endpoint(
            self.table.base_url,
            key,
            timeout_s=self.timeout_s,
            max_concurrency=self.table.max_concurrency,
            min_concurrency=self.table.concurrency_floor,
            check=self.check,
            memory=self.endpoint_memory,
            circuit=self.circuit,
        )

    def ask(self, question: str, usage: Usage, history: Sequence[Turn] = ()) -> Reply:
        try:
            return self.call(question, usage, history)
        except EndpointError as e:
            raise AgentCallError(str(e)) from None

    def call(self, question: str, usage: Usage, history: Sequence[Turn] = ()) -> Reply:
        """One question to the platform; a follow-up's ``history`` is replayed in one conversation first."""
        raise NotImplementedError

    def unanswered_check(self, platform: str, e: EndpointError) -> None:
        """Stop when a check before the first question got no HTTP answer after every retry (nothing
        listening, a wrong host): each question would fail the same way, and a run would be logged empty."""
        if not e.status and not e.code:
            raise RagtrackError(
                f"{platform} at {self.table.base_url}: {e} (is it running, and is base_url right?)"
            ) from None


def first(data: Any, *keys: str, default: Any = None) -> Any:
    """The value of the first of ``keys`` present (not None) in a dict: platforms rename fields across versions."""
    if isinstance(data, dict):
        for k in keys:
            if data.get(k) is not None:
                return data[k]
    return default


def number(value: Any) -> float | None:
    """A float from a number or a numeric string (Dify sends prices and sometimes scores as strings)."""
    try:
        return float(str(value)) if value is not None and not isinstance(value, bool) else None
    except ValueError:
        return None
