"""A Python callable or a LangChain runnable as an agent version (kind ``python``).

    [agent]
    kind = "python"
    target = "my_rag.chain:answer"   # module:attribute
    path = "src"                     # optional: a folder put first on the import path (default: the project root)
    input_key = "query"              # optional: call with {"query": question} instead of the question

The target is called with the question (a runnable: ``.invoke``). What it
returns is read as:

* a dict (or a LangChain chain's output dict): the answer from the first of
  ``answer``, ``result``, ``output``, ``text`` (a string or a message with
  ``.content``); the contexts from the first of ``contexts``, ``context``,
  ``source_documents``, ``documents`` — a list whose items are LangChain
  ``Document`` objects (``page_content``; ``id`` or ``metadata`` ``id`` /
  ``chunk_id``, ``doc_id`` / ``source``, ``score``), dicts (``id``, ``text``
  or ``page_content`` or ``content``, ``doc_id``, ``score``) or strings;
* a bare string or message: an answer without retrieval (a per-item error).

An exception is a per-item error; many in a row stop the run. The target
module's file, when it lies in the project, is part of the spec's hash (a new
registered version when it is edited), and the response cache keys on the
module's source too; code elsewhere it uses is not seen (``--no-cache``).
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from ragtrack.agent import AgentContext, AgentKind, AgentTable
from ragtrack.agents.base import AgentCallError, ExternalAgent, ExternalSpec, Reply, declared_files, first, number
from ragtrack.agents.mapping import PlatformContext
from ragtrack.errors import InputError, Problem
from ragtrack.llm.accounting import Usage

if TYPE_CHECKING:
    from ragtrack.spec import LoadedSpec

ANSWER_KEYS = ("answer", "result", "output", "text")
CONTEXT_KEYS = ("contexts", "context", "source_documents", "documents")


class PythonTable(AgentTable):
    kind: Literal["python"]
    target: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # package.module:attribute
    path: str = "."  # relative to the project root
    input_key: str | None = None
    max_concurrency: int = Field(default=1, gt=0)  # user code is not assumed thread-safe


class PythonSpec(ExternalSpec):
    agent: PythonTable


def load_target(spec: LoadedSpec, root: Path) -> Any:
    """The object ``target`` names, imported with ``path`` (under the project root) first on the
    import path; errors name the key."""
    table = spec.spec.agent
    module_name, _, attribute = table.target.partition(":")
    folder = (root / table.path).resolve()
    if not folder.is_dir():
        raise InputError([Problem(spec.path, f"folder not found: {folder}", None, "agent.path")])
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    try:
        module = importlib.import_module(module_name)
        target = getattr(module, attribute)
    except (ImportError, AttributeError) as e:
        raise InputError(
            [Problem(spec.path, f"cannot load {spec.spec.agent.target}: {e}", None, "agent.target")]
        ) from None
    if not (callable(target) or hasattr(target, "invoke")):
        raise InputError([Problem(spec.path, "the target is neither callable nor a runnable", None, "agent.target")])
    return target


class PythonAgent(ExternalAgent):
    def __init__(self, spec: LoadedSpec, ctx: AgentContext):
        super().__init__(spec, ctx)
        self.target = load_target(spec, ctx.config.root)
        self.runnable = hasattr(self.target, "invoke")
        try:
            source = inspect.getsource(inspect.getmodule(self.target) or self.target)
        except (OSError, TypeError):  # built-in or generated code: no source to hash
            source = ""
        self.source_hash = hashlib.sha256(source.encode()).hexdigest()[:12]

    def cache_identity(self) -> str:
        return f"{self.identity.hash}:{self.source_hash}"

    def ask(self, question: str, usage: Usage) -> Reply:
        key = self.table.input_key
        arg = {key: question} if key else question
        started = time.monotonic()
        try:
            out = self.target.invoke(arg) if self.runnable else self.target(arg)
        except Exception as e:  # the user's code: any failure is this item's error
            raise AgentCallError(f"{type(e).__name__}: {e}") from None
        usage.calls += 1
        usage.latencies.append(time.monotonic() - started)
        return read_output(out)

    def describe(self) -> dict[str, str]:
        return {
            **super().describe(),
            "target": self.table.target,
            "target_type": "runnable" if self.runnable else "callable",
            "target_source_hash": self.source_hash,
        }


def _text(value: Any) -> str | None:
    """A string, or a message's ``.content`` string."""
    value = getattr(value, "content", value)
    return value if isinstance(value, str) else None


def read_output(out: Any) -> Reply:
    if not isinstance(out, Mapping):
        answer = _text(out)
        if answer is None:
            raise AgentCallError(f"the target returned {type(out).__name__}; expected a dict with an answer")
        return Reply(answer, None, "the target returned only an answer; return its contexts too to score retrieval")
    answer = _text(first(out, *ANSWER_KEYS, default=""))
    contexts = first(out, *CONTEXT_KEYS)
    if answer is None:
        raise AgentCallError(f"the answer ({'/'.join(ANSWER_KEYS)}) is not text")
    if not isinstance(contexts, list | tuple):
        return Reply(answer, None, f"the output has no list of contexts ({'/'.join(CONTEXT_KEYS)})")
    return Reply(answer, [_context(c, n) for n, c in enumerate(contexts, start=1)])


def _context(item: Any, rank: int) -> PlatformContext:
    if isinstance(item, str):
        return PlatformContext(f"context@{rank}", item)
    if hasattr(item, "page_content"):  # a LangChain Document
        meta = getattr(item, "metadata", None) or {}
        unit_id = getattr(item, "id", None) or first(meta, "id", "chunk_id", "segment_id")
        text, doc, score = item.page_content, first(meta, "doc_id", "source"), first(meta, "score")
    elif isinstance(item, Mapping):
        unit_id, doc, score = first(item, "id", "chunk_id"), first(item, "doc_id", "source"), first(item, "score")
        text = first(item, "text", "page_content", "content", default="")
    else:
        return PlatformContext(f"context@{rank}", str(item))
    return PlatformContext(
        id=str(unit_id) if unit_id is not None else f"context@{rank}",
        text=str(text or ""),
        doc_id=str(doc or ""),
        doc_name=str(doc or ""),
        score=number(score),
    )


def module_file(spec: PythonSpec, root: Path) -> list[Path]:
    """The target module's file when it lies in the project (``path``/``module/name.py`` or a
    package's ``__init__.py``), found without importing it; an installed module is not."""
    base = (root / spec.agent.path).resolve().joinpath(*spec.agent.target.partition(":")[0].split("."))
    found = [p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()][:1]
    return [p for p in found if p.resolve().is_relative_to(root.resolve())]


KIND = AgentKind("python", PythonSpec, PythonAgent, declared_files, module_file)
