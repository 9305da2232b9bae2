"""Project configuration: ``ragtrack.toml`` at the project root (optional).

Everything has a default, so a project that follows the standard layout
(``pipelines/``, ``golden/kb``, ``golden/golden.jsonl``, ``mlruns/``) needs no
config file at all. API keys are never stored here: a profile names the
*environment variable* that holds its key.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ragtrack.errors import InputError, Problem
from ragtrack.llm.accounting import Price
from ragtrack.secrets import declare

CONFIG_FILE = "ragtrack.toml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProjectSection(_Strict):
    pipelines: str = "pipelines"
    corpus: str = "golden/kb"
    golden: str = "golden/golden.jsonl"
    # Empty: a SQLite store and artifacts under ./mlruns (MLFLOW_TRACKING_URI wins when set).
    tracking_uri: str = ""
    experiment: str = "ragtrack"
    registered_model: str = "rag-agent"
    cache_dir: str = ".ragtrack/cache"


class EvalSection(_Strict):
    # A unit covers a passage when they overlap by at least this share of the shorter one.
    min_overlap: float = Field(default=0.5, gt=0.0, le=1.0)
    judge: str = "offline"
    max_concurrency: int = Field(default=16, gt=0)
    timeout_s: float = Field(default=120.0, gt=0)


class Profile(_Strict):
    """A named OpenAI-compatible endpoint: ``--llm deepseek`` or ``--judge deepseek``."""

    base_url: str
    model: str
    api_key_env: str | None = None
    max_concurrency: int | None = Field(default=None, gt=0)


class ProjectConfig(_Strict):
    root: Path = Path(".")
    project: ProjectSection = ProjectSection()
    eval: EvalSection = EvalSection()
    profiles: dict[str, Profile] = {}
    prices: dict[str, Price] = {}
    # Absolute release gates checked by ``ragtrack promote``: metric name → minimum.
    gates: dict[str, float] = {}

    def path(self, relative: str) -> Path:
        return (self.root / relative) if not Path(relative).is_absolute() else Path(relative)

    @property
    def cache_dir(self) -> Path:
        return self.path(self.project.cache_dir)


def load_config(root: str | Path = ".") -> ProjectConfig:
    """Read ``ragtrack.toml`` under ``root`` if present; defaults otherwise."""
    root = Path(root)
    path = root / CONFIG_FILE
    if not path.is_file():
        return ProjectConfig(root=root)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise InputError([Problem(str(path), f"bad TOML: {e}")]) from None
    raw["prices"] = {k: Price(**v) for k, v in raw.get("prices", {}).items()}
    try:
        config = ProjectConfig(root=root, **raw)
    except (ValidationError, TypeError) as e:
        if isinstance(e, TypeError):
            raise InputError([Problem(str(path), str(e))]) from None
        raise InputError(
            [Problem(str(path), err["msg"], field=".".join(str(x) for x in err["loc"])) for err in e.errors()]
        ) from None
    declare(*(p.api_key_env for p in config.profiles.values()))
    return config
