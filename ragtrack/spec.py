"""Version specs: ``pipelines/<version>.toml`` → a validated, hashed :class:`LoadedSpec`.

Every agent version is a TOML file with a ``[version]`` table (name,
description). Its ``[agent]`` table names the kind of agent (``pipeline``,
ragtrack's own, when absent); the kind's model validates the rest of the
file, so every problem names its key path. The hash covers the parameters
*and the text of every file the spec names* (prompts), so editing a prompt
makes a new version in the registry even when no number changed.

Files a spec names must lie inside the spec's folder or the project root:
their text is logged to the tracking store.
"""

from __future__ import annotations

import difflib
import errno
import hashlib
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ragtrack import tomlfile
from ragtrack.agent import AGENT_KINDS
from ragtrack.errors import InputError, Problem
from ragtrack.files import read_text
from ragtrack.registry import UnknownNameError


@dataclass(frozen=True)
class LoadedSpec:
    """A validated spec of some agent kind, plus the texts of the files it names."""

    path: str
    kind: str
    spec: Any  # the kind's spec model (a pydantic model with a ``version`` table)
    files: dict[str, str] = field(default_factory=dict)  # key → text (prompts)
    file_paths: dict[str, str] = field(default_factory=dict)  # key → path as written in the spec
    code: dict[str, str] = field(default_factory=dict)  # the agent's source file (from the root) → its text's hash

    @property
    def name(self) -> str:
        return self.spec.version.name

    @property
    def description(self) -> str:
        return self.spec.version.description

    @property
    def builtin(self) -> bool:
        """Loaded from the package's own specs (no pipelines/<version>.toml in the project)."""
        return Path(self.path).resolve().parent == builtin_dir().resolve()

    @property
    def hash(self) -> str:
        payload = {"kind": self.kind, "spec": self.spec.model_dump(mode="json"), "files": self.files}
        if self.code:  # only kinds with code of their own: every other spec keeps the hash it had
            payload["code"] = self.code
        blob = json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def file_hash(self, key: str) -> str:
        return hashlib.sha256(self.files[key].encode()).hexdigest()[:12]

    def params(self) -> dict[str, str]:
        """Flat ``section.key → value`` strings, as logged to MLflow; named files by path and hash."""
        flat: dict[str, str] = {}
        dump = self.spec.model_dump(mode="json")
        dump.pop("prompts", None)  # named files are listed below, with their hashes
        _flatten(dump, "", flat)
        for key, rel in self.file_paths.items():
            flat[f"prompt.{key}"] = rel
            flat[f"prompt.{key}.hash"] = self.file_hash(key)
        for rel, digest in self.code.items():
            flat[f"code.{rel}.hash"] = digest
        flat["spec_hash"] = self.hash
        return flat

    def with_values(self, update: dict[str, Any]) -> LoadedSpec:
        """The same spec with some values replaced (e.g. ``{"llm": {"model": ...}}`` for ``--llm``):
        a different, separately hashed agent."""
        data = _merge(self.spec.model_dump(mode="json"), update)
        spec = AGENT_KINDS.get(self.kind).spec_model.model_validate(data)
        return LoadedSpec(self.path, self.kind, spec, self.files, self.file_paths, self.code)

    def to_json(self) -> str:
        return json.dumps(
            {
                "path": self.path,
                "kind": self.kind,
                "spec": self.spec.model_dump(mode="json"),
                "files": self.files,
                "file_paths": self.file_paths,
                "code": self.code,
            },
            indent=1,
            ensure_ascii=False,
        )

    @classmethod
    def from_json(cls, text: str) -> LoadedSpec:
        data = json.loads(text)
        spec = AGENT_KINDS.get(data["kind"]).spec_model.model_validate(data["spec"])
        return cls(data["path"], data["kind"], spec, data["files"], data["file_paths"], data.get("code", {}))


def _flatten(value: Any, prefix: str, out: dict[str, str]) -> None:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    else:
        out[prefix] = str(value)


def _merge(base: dict, update: dict) -> dict:
    out = dict(base)
    for k, v in update.items():
        out[k] = _merge(out.get(k, {}), v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


# Versions ragtrack ships, per corpus language, inside the package (ragtrack/builtin/<set>-<version>.toml).
BUILTIN_VERSIONS = ("v1", "v2", "v3", "v4", "v5")


def builtin_set(language: str) -> str:
    """Which built-in versions fit a corpus: ``en``; ``zh`` (m3e-small) when the Chinese embedder is
    installed, else ``zh-bm25`` (BM25 only: an English embedder would only drag Chinese retrieval down)."""
    if language != "zh":
        return "en"
    from ragtrack.pipeline.models import CHINESE_EMBEDDING, locate

    return "zh" if locate(CHINESE_EMBEDDING) else "zh-bm25"


def builtin_dir() -> Path:
    return Path(str(resources.files("ragtrack") / "builtin"))


def builtin_spec_path(version: str, language: str) -> Path:
    return builtin_dir() / f"{builtin_set(language)}-{version}.toml"


def version_order(name: str) -> tuple:
    """A sort key that puts v2 before v10 (numbers inside a name compare as numbers)."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name))


def resolve_spec_path(version: str, pipelines_dir: str | Path = "pipelines", language: str | None = None) -> Path:
    """``v5`` → ``pipelines/v5.toml``; a path to a ``.toml`` file is taken as-is.

    Without that file, a built-in version name (v1–v5) resolves to the package's own spec for
    the corpus ``language``, so ``--version v1`` works in any folder with a corpus and a golden set.
    """
    candidate = Path(version)
    if candidate.suffix == ".toml":
        return candidate
    local = Path(pipelines_dir) / f"{version}.toml"
    if local.is_file() or language is None or version not in BUILTIN_VERSIONS:
        return local
    return builtin_spec_path(version, language)


def _misnamed(path: Path, text: str, declared: object) -> Problem:
    """A copied spec that kept its original's name would be logged, registered and promoted as that
    version, overwriting its history: refused, at the line that says it."""
    message = (
        f"declares name {declared!r}, but the file is {path.name}: the file name is the version's name "
        f"(set name = {path.stem!r}, or leave it out)"
    )
    return Problem(str(path), message, tomlfile.key_line(text, ["version", "name"]), "version.name")


def _misspelt_agent_table(raw: dict) -> str | None:
    """A top-level table that reads like a misspelt ``agent`` (and is no pipeline table)."""
    pipeline_keys = AGENT_KINDS.get("pipeline").spec_model.model_fields
    tables = [k for k, v in raw.items() if isinstance(v, dict) and k not in pipeline_keys]
    return next(iter(difflib.get_close_matches("agent", tables, n=1, cutoff=0.6)), None)


def _file_field(key: str) -> str:
    """The key path a named file's problems are reported at (a kind may name a file by its key path)."""
    return key if "." in key else f"prompts.{key}"


def load_spec(
    version: str, pipelines_dir: str | Path = "pipelines", root: str | Path | None = None, language: str | None = None
) -> LoadedSpec:
    """Load, validate and hash a version spec; every problem names the key path.

    Files the spec names must lie inside the spec's folder or the project
    ``root``: their text is logged to the tracking store, so a path such as
    ``/proc/self/environ`` or ``../../.env`` must never be read.
    """
    path = resolve_spec_path(version, pipelines_dir, language)
    if not path.is_file():
        available = sorted((p.stem for p in Path(pipelines_dir).glob("*.toml")), key=version_order)
        hint = f" (available: {', '.join(available)})" if available else " (`ragtrack init` writes v1-v5)"
        raise InputError([Problem(str(path), f"version spec not found{hint}")])
    raw, text = tomlfile.load(path)
    if isinstance(raw.get("version", {}), dict):
        declared = raw.setdefault("version", {}).setdefault("name", path.stem)
        # Found by its name, or given as a path (a built-in's zh-v1.toml declares v1: it is not the user's)
        named = path.stem == version or (
            Path(version).suffix == ".toml" and path.resolve().parent != builtin_dir().resolve()
        )
        if named and declared != path.stem:  # the file name and the declared name must agree
            raise InputError([_misnamed(path, text, declared)])
    table = raw.get("agent")
    if table is None and (near := _misspelt_agent_table(raw)):
        # Without [agent] the spec reads as a ragtrack pipeline, and every pipeline table would be
        # reported missing before the one line that matters.
        message = "unknown table (did you mean 'agent'?); without [agent] a spec is a ragtrack pipeline"
        raise InputError(tomlfile.locate([Problem(str(path), message, field=near)], text))
    kind_name = table.get("kind", "pipeline") if isinstance(table, dict) else "pipeline"
    try:
        kind = AGENT_KINDS.get(str(kind_name))
    except UnknownNameError as e:
        raise InputError(tomlfile.locate([Problem(str(path), str(e), field="agent.kind")], text)) from None
    spec: BaseModel = tomlfile.validate(kind.spec_model, raw, path, text)

    texts, problems = {}, []
    allowed = [path.parent.resolve(), *([Path(root).resolve()] if root is not None else [])]
    named = kind.files(spec)
    for key, rel in named.items():
        field_path = _file_field(key)
        try:
            target = (path.parent / rel).resolve()
        except (RuntimeError, OSError) as e:  # a symbolic-link loop: RuntimeError in Python 3.11, OSError later
            looped = not isinstance(e, OSError) or e.errno == errno.ELOOP
            why = "is a loop of symbolic links: it names no file" if looped else f"cannot be resolved: {e.strerror}"
            problems.append(Problem(str(path), f"{rel} {why}", field=field_path))
            continue
        except ValueError:  # a NUL byte
            problems.append(Problem(str(path), f"{rel!r} is not a file name", field=field_path))
            continue
        if not any(target.is_relative_to(folder) for folder in allowed):
            where = " or ".join(str(folder) for folder in allowed)
            problems.append(Problem(str(path), f"{rel} is outside {where}", field=field_path))
        elif not target.is_file():
            problems.append(Problem(str(path), f"prompt file not found: {target}", field=field_path))
        else:
            texts[key] = read_text(target, normalize=True)  # a CRLF checkout is the same agent
    for key, why in kind.check_files(spec, texts).items():
        problems.append(Problem(str(path), f"{named[key]} {why}", field=_file_field(key)))
    if problems:
        raise InputError(tomlfile.locate(problems, text))
    project = Path(root) if root is not None else path.parent
    code = {
        source.resolve().relative_to(project.resolve()).as_posix(): hashlib.sha256(
            read_text(source, normalize=True).encode()
        ).hexdigest()[:12]
        for source in kind.code(spec, project)
    }
    return LoadedSpec(str(path), kind.name, spec, texts, dict(named), code)
