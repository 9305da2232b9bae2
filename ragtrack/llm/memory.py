"""What ragtrack learned about each endpoint, kept on disk between runs.

Two facts are worth remembering, because learning them again costs every run:

* the JSON mode the endpoint accepts (see :mod:`ragtrack.llm.openai_backend`):
  finding out costs a failed request per mode it rejects;
* how many requests it serves at once: the adaptive limiter
  (:mod:`ragtrack.llm.concurrency`) starts low and needs a few round trips to
  climb to an endpoint's capacity. An eval run on every commit against the same
  endpoint starts where the last one ended, as TCP caches a route's congestion
  window. Still adaptive: a busier endpoint is detected and the limit halves.
  A server that declares how many requests it computes at once (llama.cpp's
  ``total_slots``) is asked on every run instead, since a restart may change
  it; one that once did not say is not asked again.

Keyed by backend identity (model @ base URL); no key or secret is stored.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragtrack.files import atomic_write_json
from ragtrack.llm.base import TransientError
from ragtrack.llm.concurrency import INITIAL_LIMIT, AdaptiveLimiter

if TYPE_CHECKING:
    from ragtrack.llm.base import ChatBackend

#: Calls on which a JSON mode failed with a 5xx (and a lower one answered) before the lower one is remembered.
STEP_DOWN_AFTER = 4

_open: dict[Path, EndpointMemory] = {}
_open_lock = threading.Lock()


def shared_memory(path: Path) -> EndpointMemory:
    """The one memory of ``path`` in this process: LLM and agent endpoints write the same file,
    and two instances would each overwrite the other's entries."""
    with _open_lock:
        key = path.resolve()
        if key not in _open:
            _open[key] = EndpointMemory(path)
        return _open[key]


class EndpointMemory:
    """Per-endpoint facts in one JSON file (``<cache>/endpoints.json``); ``path=None`` keeps them in memory."""

    def __init__(self, path: Path | None):
        self.path = path
        self._lock = threading.Lock()
        self._facts: dict[str, dict[str, Any]] = {}
        if path and path.is_file():
            try:
                facts = json.loads(path.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError):  # a damaged memory is only a slower start
                facts = {}
            self._facts = {k: v for k, v in facts.items() if isinstance(v, dict)} if isinstance(facts, dict) else {}

    def json_mode(self, endpoint: str, default: str) -> tuple[str, bool]:
        """(mode to try, whether the endpoint has confirmed it); ``default`` for a new endpoint."""
        with self._lock:
            entry = self._facts.get(endpoint, {})
            return entry.get("mode", default), entry.get("confirmed", False)

    def json_answered(self, endpoint: str, tried: str, answered: str, refused: bool) -> None:
        """The endpoint answered a JSON-mode request in mode ``answered``; the call had tried ``tried``
        (the remembered mode) first. ``tried`` answered is confirmed for good. A lower mode is
        remembered at once when ``tried`` was ``refused`` with a 4xx, else only after
        :data:`STEP_DOWN_AFTER` calls found ``tried`` failing (llama.cpp refuses a mode with a 500, which
        an outage sends too); a call that stepped down while another confirmed ``tried`` changes nothing."""
        with self._lock:
            entry = self._facts.get(endpoint, {})
            current, confirmed = entry.get("mode", tried), entry.get("confirmed", False)
        if answered == tried:
            self._update(endpoint, {"mode": tried, "confirmed": True, "failed": 0})
        elif current == tried and not confirmed:
            failed = int(entry.get("failed", 0)) + 1
            if refused or failed >= STEP_DOWN_AFTER:
                self._update(endpoint, {"mode": answered, "confirmed": True, "failed": 0})
            else:
                self._update(endpoint, {"mode": tried, "confirmed": False, "failed": failed})

    def concurrency(self, endpoint: str) -> tuple[int, bool] | None:
        """(limit the last run ended at, whether it had seen congestion), or None for a new endpoint."""
        with self._lock:
            entry = self._facts.get(endpoint, {})
        limit = entry.get("concurrency")
        if not isinstance(limit, int) or limit < 1:
            return None
        return limit, bool(entry.get("congested", False))

    def set_concurrency(self, endpoint: str, limit: int, congested: bool) -> None:
        self._update(endpoint, {"concurrency": limit, "congested": congested})

    def limiter(
        self,
        endpoint: str,
        maximum: int,
        first_contact: int = INITIAL_LIMIT,
        minimum: int = 1,
        declared: Callable[[], int | None] | None = None,
    ) -> AdaptiveLimiter:
        """An adaptive limit for ``endpoint`` between ``minimum`` and ``maximum`` that starts where its
        last run ended (a new endpoint: at ``first_contact``) and remembers where it goes.

        ``declared`` asks the server how many requests it computes at once (None: it does not
        say). A server that says gets that many from the start and never more: requests beyond
        its slots only wait in its queue. The limit still halves if other clients take slots."""
        slots = self._declared_slots(endpoint, declared) if declared and minimum < maximum else None
        remembered = self.concurrency(endpoint)
        if slots:
            maximum = max(minimum, min(maximum, slots))
            initial, congested = (min(remembered[0], maximum) if remembered else maximum), True
        else:
            initial, congested = remembered or (first_contact, False)
        return AdaptiveLimiter(
            maximum,
            initial=initial,
            minimum=minimum,
            congested=congested,
            on_change=lambda limit, congested: self.set_concurrency(endpoint, limit, congested),
        )

    def _declared_slots(self, endpoint: str, ask: Callable[[], int | None]) -> int | None:
        with self._lock:
            said = self._facts.get(endpoint, {}).get("slots")
        if said == 0:  # asked once and the server did not say: a hosted API is not asked on every run
            return None
        try:
            slots = ask()
        except TransientError:  # down, or failing: ask again next run, probe this one
            return None
        self._update(endpoint, {"slots": slots or 0})
        return slots

    def _update(self, endpoint: str, facts: dict[str, Any]) -> None:
        with self._lock:
            entry = self._facts.setdefault(endpoint, {})
            if all(entry.get(k) == v for k, v in facts.items()):
                return
            entry.update(facts)
            if self.path:
                atomic_write_json(self.path, self._facts)


def backend_limiter(backend: ChatBackend, memory: EndpointMemory) -> AdaptiveLimiter:
    """The adaptive limit for ``backend``'s endpoint, from what ``memory`` and the server tell."""
    return memory.limiter(
        backend.identity,
        backend.max_concurrency,
        minimum=backend.min_concurrency,
        declared=backend.declared_slots,
    )
