"""The small interface every LLM step goes through.

Two ideas keep the rest of ragtrack simple:

* a :class:`ChatBackend` only knows how to send chat messages to one model
  (an OpenAI-compatible endpoint, a local transformers model);
* a :class:`Step` knows one task: how to phrase it (``messages``), how to read
  the reply (``parse``) and how to do it deterministically with no model at
  all (``offline``). The ``offline`` backend simply calls the latter.

Everything else (cache, retries, concurrency, accounting) lives in
:class:`ragtrack.llm.client.LLM`, once, for all steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from ragtrack.llm.accounting import Usage
from ragtrack.secrets import redact

I = TypeVar("I")  # noqa: E741 - the step's input
O = TypeVar("O")

Message = dict[str, str]


class ParseError(ValueError):
    """The model's reply could not be turned into the step's output."""


class CallError(Exception):
    """A failed call to an endpoint. Its message is redacted when the error is made: servers quote
    the key they were sent (OpenAI's 401 does), and an exception's text travels far (chained
    tracebacks, logs, item records)."""

    def __init__(self, message: str):
        super().__init__(redact(message))


class TransientError(CallError):
    """A failure worth retrying: 429, 5xx, timeout, dropped connection."""

    def __init__(self, message: str, retry_after: float | None = None, overload: bool = False, timed_out: bool = False):
        super().__init__(message)
        self.retry_after = retry_after
        self.overload = overload  # the endpoint said "slow down" (429/503): shrink concurrency
        self.timed_out = timed_out  # no reply within the timeout (counted by the circuit, attempt by attempt)


class PermanentError(CallError):
    """A failure that a retry cannot fix (400, auth, unknown model)."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status

    @property
    def refused(self) -> bool:
        """The endpoint refused the credentials (401, 403) or has no such model or path (404): every
        later call would fail alike."""
        return self.status in (401, 403, 404)


@dataclass(frozen=True)
class ChatParams:
    temperature: float = 0.0
    max_tokens: int = 512
    stop: tuple[str, ...] = ()
    # JSON schema of the expected reply; the backend asks for it as strictly as the
    # endpoint allows (json_schema → json_object → plain prompting).
    json_schema: dict[str, Any] | None = None
    # Asked of endpoints that take one (OpenAI, vLLM, llama.cpp); None: not sent, and not in the cache key.
    seed: int | None = None


@dataclass(frozen=True)
class Completion:
    text: str
    tokens_in: int = 0
    tokens_out: int = 0
    finish_reason: str = "stop"
    latency_s: float = 0.0

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


class ChatBackend(Protocol):
    """One model behind one endpoint."""

    #: Stable, secret-free description, e.g. ``openai:deepseek-chat@https://api.deepseek.com/v1``.
    identity: str
    #: The most requests this backend may have in flight (the adaptive limit stays below it).
    max_concurrency: int
    #: The fewest the adaptive limit may fall to (``max_concurrency`` too: a fixed pool).
    min_concurrency: int

    def chat(self, messages: list[Message], params: ChatParams) -> Completion: ...

    def declared_slots(self) -> int | None:
        """How many requests the server says it computes at once, or None if it does not say
        (then the adaptive limit probes for it); :class:`TransientError` if it could not be asked.
        Asked once per run, before the first request."""
        ...


@dataclass
class Step(Generic[I, O]):
    """One LLM task. Subclasses implement :meth:`messages`, :meth:`parse` and :meth:`offline`."""

    name: str
    prompt: str = ""
    max_tokens: int = 512
    temperature: float = 0.0
    json_schema: dict[str, Any] | None = field(default=None, repr=False)
    seed: int | None = None  # a repeated judge sample's (ragtrack.evaluation.judges)

    def messages(self, inp: I) -> list[Message]:
        raise NotImplementedError

    def parse(self, text: str) -> O:
        raise NotImplementedError

    def offline(self, inp: I) -> O:
        raise NotImplementedError


@dataclass(frozen=True)
class StepResult(Generic[O]):
    """What a step produced: a value, or an error with the raw reply kept for the record,
    and what producing it cost."""

    value: O | None
    error: str | None = None
    raw: str | None = None
    usage: Usage = field(default_factory=Usage)

    @property
    def ok(self) -> bool:
        return self.error is None
