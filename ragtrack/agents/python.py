"""A Python callable or a LangChain runnable as an agent version (kind ``python``).

    [agent]
    kind = "python"
    target = "my_rag.chain:answer"   # module:attribute
    path = "src"                     # optional: a folder put first on the import path (default: the project root)
    input_key = "query"              # optional: call with {"query": question} instead of the question

The target is called with the question (a runnable: ``.invoke``). A follow-up
item's earlier turns (``[{"role", "content"}, …]``) go with it: as the ``history``
key of the input dict when ``input_key`` is set, else as a ``history=`` keyword
argument of a callable that takes one; a target that can receive no history
answers follow-ups with a per-item error that says how to let it. What it
returns is read as:

* a dict (or a LangChain chain's output dict): the answer from the first of
  ``answer``, ``result``, ``output``, ``text`` (a string or a message with
  ``.content``); the contexts from the first of ``contexts``, ``context``,
  ``source_documents``, ``documents`` — a list whose items are LangChain
  ``Document`` objects (``page_content``; ``id`` or ``metadata`` ``id`` /
  ``chunk_id``, ``doc_id`` / ``source``, ``score``), dicts (``id``, ``text``
  or ``page_content`` or ``content``, ``doc_id``, ``score``) or strings;
* a bare string or message: an answer without retrieval (a per-item error);
* a dict without an answer, or with ``None`` for it: a per-item error (an empty
  string is an answer, and is scored as one).

An exception is a per-item error; many in a row stop the run. The target
module's file, when it lies in the project, is part of the spec's hash (a new
registered version when it is edited), and the response cache keys on the
module's source too; code elsewhere it uses is not seen (``--no-cache``).
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import inspect
import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator

from ragtrack.agent import AgentContext, AgentKind, AgentTable, turns_json
from ragtrack.agents.base import (
    AgentCallError,
    ExternalAgent,
    ExternalSpec,
    Reply,
    declared_files,
    first,
    number,
    spec_problem,
)
from ragtrack.agents.mapping import PlatformContext
from ragtrack.llm.accounting import Usage

if TYPE_CHECKING:
    from ragtrack.golden import Turn
    from ragtrack.spec import LoadedSpec

ANSWER_KEYS = ("answer", "result", "output", "text")
CONTEXT_KEYS = ("contexts", "context", "source_documents", "documents")
TARGET = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


class PythonTable(AgentTable):
    kind: Literal["python"]
    target: str  # package.module:attribute
    path: str = "."  # relative to the project root
    input_key: str | None = None
    max_concurrency: int = Field(default=1, gt=0)  # user code is not assumed thread-safe

    @field_validator("target")
    @classmethod
    def _module_colon_attribute(cls, value: str) -> str:
        if not TARGET.fullmatch(value):
            raise ValueError(f"expected module:attribute, e.g. my_rag.chain:answer (got {value!r})")
        return value


class PythonSpec(ExternalSpec):
    agent: PythonTable


def load_target(spec: LoadedSpec, root: Path) -> Any:
    """The object ``target`` names, imported with ``path`` (under the project root) first on the
    import path; errors name the key and its line in the spec.

    Two versions may hold modules of the same name in different folders (``agent_v1/rag.py``,
    ``agent_v2/rag.py``): each version gets its own folder's module, even when another version's
    was imported first in this process (a notebook evaluating both)."""
    table = spec.spec.agent
    module_name, _, attribute = table.target.partition(":")
    folder = (root / table.path).resolve()
    if not folder.is_dir():
        raise spec_problem(spec, "agent.path", f"folder not found: {folder}")
    if str(folder) in sys.path:
        sys.path.remove(str(folder))
    sys.path.insert(0, str(folder))
    # The target and every module beside it it may import (agent_v1/retriever.py vs agent_v2/retriever.py)
    for top in {module_name.split(".")[0], *(p.stem for p in folder.glob("*.py")), *_packages(folder)}:
        _forget_other_folders_module(top, folder)
    try:
        module = importlib.import_module(module_name)
    except SyntaxError as e:
        where = f"{e.filename}:{e.lineno}" if e.filename else module_name
        raise spec_problem(spec, "agent.target", f"cannot load {table.target}: {where}: {e.msg}") from None
    except ModuleNotFoundError as e:
        if e.name and module_name != e.name and not module_name.startswith(f"{e.name}."):
            message = f"{module_name} imports {e.name}, which is not installed in this Python"
        else:
            message = f"no module {e.name or module_name} in {folder} or on the import path (agent.path, target)"
        raise spec_problem(spec, "agent.target", f"cannot load {table.target}: {message}") from None
    except Exception as e:  # the module's own code failed while it was imported
        raise spec_problem(spec, "agent.target", f"importing {module_name} failed: {type(e).__name__}: {e}") from None
    if not hasattr(module, attribute):
        names = [n for n in vars(module) if not n.startswith("_")]
        hint = difflib.get_close_matches(attribute, names, n=1)
        suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise spec_problem(spec, "agent.target", f"{module_name} has no attribute {attribute!r}{suggestion}")
    target = getattr(module, attribute)
    if not (callable(target) or hasattr(target, "invoke")):
        raise spec_problem(spec, "agent.target", "the target is neither callable nor a runnable")
    return target


def _packages(folder: Path) -> list[str]:
    return [d.name for d in folder.iterdir() if d.is_dir() and (d / "__init__.py").is_file()]


def _forget_other_folders_module(top: str, folder: Path) -> None:
    """Drop ``top`` (and its submodules) from the module cache when ``folder`` holds its own
    ``top`` but the cached one came from elsewhere, so that the import finds this folder's."""
    if not ((folder / f"{top}.py").is_file() or (folder / top).is_dir()):
        return  # an installed package, or a module of another folder on the path: not ours to reload
    loaded = sys.modules.get(top)
    origin = getattr(loaded, "__file__", None)
    if loaded is None or (origin and Path(origin).resolve().is_relative_to(folder)):
        return
    for name in [n for n in sys.modules if n == top or n.startswith(f"{top}.")]:
        del sys.modules[name]


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

    def ask(self, question: str, usage: Usage, history: Sequence[Turn] = ()) -> Reply:
        key = self.table.input_key
        arg: Any = {key: question} if key else question
        kwargs: dict[str, Any] = {}
        if history and key:
            arg["history"] = turns_json(history)
        elif history and not self.runnable and takes_history(self.target):
            kwargs["history"] = turns_json(history)
        elif history:
            raise AgentCallError(
                "a follow-up item (history), and the target cannot receive its earlier turns: set "
                'input_key (it is then called with {input_key: question, "history": [...]}) or give it a '
                "history= parameter"
            )
        started = time.monotonic()
        try:
            out = self.target.invoke(arg) if self.runnable else self.target(arg, **kwargs)
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


def takes_history(target: Any) -> bool:
    """Does the callable accept a ``history=`` keyword (named, or through ``**kwargs``)?"""
    try:
        parameters = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature
        return False
    return any(p.name == "history" or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


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
    out = dict(out)
    found = first(out, *ANSWER_KEYS)
    if found is None:  # a misnamed key would otherwise be scored as an empty answer
        named = [k for k in ANSWER_KEYS if k in out]
        if named:
            raise AgentCallError(f"the answer ({named[0]}) is None")
        keys = ", ".join(map(str, list(out)[:8])) or "none"
        raise AgentCallError(f"the output has no answer ({'/'.join(ANSWER_KEYS)}; its keys: {keys})")
    answer = _text(found)
    contexts = first(out, *CONTEXT_KEYS)
    if answer is None:
        raise AgentCallError(f"the answer ({'/'.join(ANSWER_KEYS)}) is not text")
    if not isinstance(contexts, list | tuple):
        return Reply(answer, None, f"the output has no list of contexts ({'/'.join(CONTEXT_KEYS)})")
    for n, c in enumerate(contexts, start=1):  # a stray 17 read as text matched a passage saying "17"
        if not (isinstance(c, str | Mapping) or hasattr(c, "page_content")):
            problem = (
                f"context {n} is {type(c).__name__} {str(c)[:40]!r}; expected text, a dict with text or a Document"
            )
            return Reply(answer, None, problem)
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
        raise TypeError(f"not a context: {type(item).__name__}")  # read_output lets none through
    return PlatformContext(
        id=str(unit_id) if unit_id is not None else f"context@{rank}",
        text=str(text or ""),
        doc_id=str(doc or ""),
        doc_name=str(doc or ""),
        score=number(score),
    )


def module_file(spec: PythonSpec, root: Path) -> list[Path]:
    """The agent's source files in the project, found without importing them: the target module's
    file (``path``/``module/name.py`` or a package's ``__init__.py``) and, when it lives in a folder
    of its own below the project root, every ``.py`` file of that folder (its helpers: editing
    ``agent/retriever.py`` that ``agent/rag.py`` imports changes the agent too). An installed
    module is not the project's."""
    project = root.resolve()
    base = (root / spec.agent.path).resolve().joinpath(*spec.agent.target.partition(":")[0].split("."))
    found = [p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()][:1]
    found = [p.resolve() for p in found if p.resolve().is_relative_to(project)]
    if not found or found[0].parent == project:
        return found
    folder = found[0].parent
    helpers = (p for p in folder.rglob("*.py") if not any(part.startswith((".", "__pycache__")) for part in p.parts))
    return sorted({found[0], *(p.resolve() for p in helpers)})


KIND = AgentKind("python", PythonSpec, PythonAgent, declared_files, module_file)
