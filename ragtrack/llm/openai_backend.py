"""OpenAI-compatible endpoints (OpenAI, DeepSeek, Qwen/DashScope, vLLM, Ollama, llama.cpp).

Servers differ in how they take a JSON-output request. OpenAI and vLLM accept
``response_format={"type": "json_schema", ...}``; the llama.cpp Python server
answers HTTP 500 to that but accepts ``{"type": "json_object", "schema": ...}``;
others know only ``json_object``; some nothing at all. The backend starts at
the strictest form and steps down one level each time an endpoint rejects a
form it has never accepted, remembering the outcome per endpoint (:mod:`ragtrack.llm.memory`) — so a
rejected request is never retried ten times in the same shape. A 5xx is ambiguous
(llama.cpp's refusal, or an outage): the lower form is remembered only after
several calls, and when every form fails alike the endpoint is failing, not the
form, so later attempts try the remembered form and plain prompting only, until
something is answered.

Servers differ in what they say about themselves, too. llama.cpp's server
answers ``GET /props`` with ``total_slots``, the requests it computes at once
(its ``--parallel``); the adaptive limit then starts there instead of probing
for it (:meth:`OpenAIBackend.declared_slots`). Hosted APIs and vLLM answer 404.
"""

from __future__ import annotations

import time
from typing import Any

from ragtrack.llm.base import ChatParams, Completion, Message, PermanentError, TransientError
from ragtrack.llm.memory import EndpointMemory
from ragtrack.secrets import redact, without_credentials

JSON_MODES = ("json_schema", "json_object_schema", "json_object", "plain")
PROPS_TIMEOUT_S = 5.0  # a server that takes longer to describe itself is not one that will


class OpenAIBackend:
    """A chat model behind an OpenAI-compatible base URL, through the ``openai`` package."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None,
        api_key: str | None,
        timeout_s: float = 120.0,
        max_concurrency: int = 16,
        min_concurrency: int = 1,
        memory: EndpointMemory | None = None,
    ):
        import openai  # imported here: offline runs never need it

        self._openai = openai
        # max_retries=0: ragtrack's client owns retries, backoff and the concurrency limit.
        self.client = openai.OpenAI(
            base_url=base_url, api_key=api_key or "not-needed", timeout=timeout_s, max_retries=0
        )
        self.model = model
        # Identity is logged: keep credentials that some users put in the URL out of it.
        self.base_url = without_credentials(str(self.client.base_url).rstrip("/"))
        self.identity = redact(f"openai:{model}@{self.base_url}")  # a key pasted as the model name, too
        self.max_concurrency = max_concurrency
        self.min_concurrency = min_concurrency  # the limiter bounds it by max_concurrency
        self.memory = memory or EndpointMemory(None)
        self._timeout_s = timeout_s
        self._failing = False  # the last JSON-mode walk failed in every mode: the endpoint, not the form

    def declared_slots(self) -> int | None:
        """llama.cpp's ``total_slots`` from ``GET <server>/props`` (the server's root: a base URL's
        ``/v1`` removed), with the same key as every request; None when the server answers without
        it (404 from hosted APIs, vLLM, Ollama). A server that could not be asked (refused, timed
        out, 5xx, 401) raises :class:`TransientError`: it may well say once it is up. A server that
        declares its slots is served exactly that many at once from its first request; one that
        does not is probed by the adaptive limit, starting at 4."""
        import httpx

        root = str(self.client.base_url).rstrip("/").removesuffix("/v1")
        try:
            response = self.client.get(
                f"{root}/props", cast_to=httpx.Response, options={"timeout": min(PROPS_TIMEOUT_S, self._timeout_s)}
            )
        except self._openai.APIStatusError as e:
            if e.status_code in (400, 404, 405, 501):  # no such endpoint here
                return None
            raise TransientError(f"GET /props: HTTP {e.status_code}") from None
        except self._openai.APIError as e:  # refused, timed out: not an answer
            raise TransientError(f"GET /props: {type(e).__name__}") from None
        try:
            slots = response.json().get("total_slots")
        except (ValueError, AttributeError):  # not JSON, or not an object: not llama.cpp's answer
            return None
        return slots if isinstance(slots, int) and not isinstance(slots, bool) and slots > 0 else None

    def chat(self, messages: list[Message], params: ChatParams) -> Completion:
        remembered, confirmed = self.memory.json_mode(self.identity, JSON_MODES[0])
        mode, refused = remembered, False
        walk = params.json_schema is not None and not confirmed
        while True:
            kwargs = self._request(messages, params, mode)
            started = time.monotonic()
            try:
                response = self.client.chat.completions.create(**kwargs)
            except self._openai.APIStatusError as e:
                if walk and e.status_code in (400, 422, 500, 501):
                    # This endpoint may not take this JSON mode (or may be failing): try the next one at
                    # once. Only a lower mode that is answered counts (see the module docstring).
                    if mode != JSON_MODES[-1]:
                        refused = refused or (mode == remembered and e.status_code in (400, 422))
                        # While the endpoint is failing in every mode, only plain prompting is tried
                        # after the remembered mode: two requests per attempt of an outage, not four.
                        mode = JSON_MODES[-1] if self._failing else JSON_MODES[JSON_MODES.index(mode) + 1]
                        continue
                    self._failing = True  # every mode failed alike
                raise self._classify(e) from None
            except (self._openai.APITimeoutError, self._openai.APIConnectionError) as e:
                timed_out = isinstance(e, self._openai.APITimeoutError)
                raise TransientError(f"{type(e).__name__}: {e}", overload=timed_out, timed_out=timed_out) from None
            except Exception as e:  # malformed or truncated body from the server
                raise TransientError(f"bad response: {type(e).__name__}: {e}") from None
            self._failing = False
            if params.json_schema is not None and (mode != remembered or not confirmed):
                self.memory.json_answered(self.identity, remembered, mode, refused)
            return self._completion(response, time.monotonic() - started)

    def _request(self, messages: list[Message], params: ChatParams, mode: str) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": params.temperature,
            **({"seed": params.seed} if params.seed is not None else {}),
            # Always explicit: some servers ignore max_completion_tokens and run to the context limit.
            "max_tokens": params.max_tokens,
        }
        if params.stop:
            kwargs["stop"] = list(params.stop)
        schema = params.json_schema
        if schema is not None and mode == "json_schema":
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "reply", "schema": schema, "strict": True},
            }
        elif schema is not None and mode == "json_object_schema":
            kwargs["response_format"] = {"type": "json_object", "schema": schema}
        elif schema is not None and mode == "json_object":
            kwargs["response_format"] = {"type": "json_object"}
        return kwargs

    def _classify(self, e: Exception) -> Exception:
        status = getattr(e, "status_code", 0)
        if status == 429 or status >= 500:
            retry_after = None
            response = getattr(e, "response", None)
            if response is not None:
                try:
                    retry_after = float(response.headers.get("retry-after", ""))
                except ValueError:
                    retry_after = None
            return TransientError(f"HTTP {status}", retry_after=retry_after, overload=status in (429, 503))
        return PermanentError(f"HTTP {status}: {getattr(e, 'message', e)}", status)

    @staticmethod
    def _completion(response: Any, latency: float) -> Completion:
        if not getattr(response, "choices", None):
            # Not a server failing for a moment, so not retried: a web page where the API should be
            # (a base_url without /v1), or a gateway that answers with no completion at all.
            shown = f"text ({response[:80]!r})" if isinstance(response, str) else "no choices"
            raise PermanentError(
                f"HTTP 200 with {shown}, not a chat completion: is base_url the API's (it often ends in /v1)?"
            )
        choice = response.choices[0]
        text = (choice.message.content or "") if choice.message else ""
        usage = getattr(response, "usage", None)
        return Completion(
            text=text,
            tokens_in=getattr(usage, "prompt_tokens", 0) or 0,
            tokens_out=getattr(usage, "completion_tokens", 0) or max(1, len(text) // 4),
            finish_reason=choice.finish_reason or "stop",
            latency_s=latency,
        )
