"""Secrets (API keys, tokens, passwords) never reach MLflow, logs or caches.

One place knows what a secret looks like: the value of any environment
variable whose name says it holds one (``*API_KEY*``, ``*_TOKEN``,
``*SECRET*``, ``*PASSWORD*``), of any variable a config or spec names as
holding a key (``api_key_env``), and anything shaped like a provider key
(``sk-…``). Text on its way out is either redacted (error messages, model
replies) or refused (artifacts that would be logged verbatim).
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Annotated

from pydantic import AfterValidator

from ragtrack.errors import RagtrackError

_SECRET_NAME = re.compile(r"API_KEY|APIKEY|_TOKEN$|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
# Keys by their shape: OpenAI-style ``sk-…``, and Coze's personal and service access tokens ``pat_…``,
# ``sat_…`` (which, unlike most keys, could pass for the name of an environment variable).
_KEY_SHAPE = re.compile(r"\b(?:(?:sk|pk|key)-[A-Za-z0-9_\-*]{8,}|(?:pat|sat)_[A-Za-z0-9]{16,})")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Query parameters that carry a credential (Azure's ``api-key``, ``access_token``, signed URLs' ``sig``).
_SECRET_PARAM = re.compile(r"key|token|secret|password|passwd|sig|auth", re.IGNORECASE)
_MIN_LENGTH = 8  # shorter values ("1", "true") would redact ordinary words

_declared: set[str] = set()  # variable names a config or spec declared as holding a key


def env_name(name: str) -> str:
    """``name`` if it can name an environment variable; else ValueError (whose message never
    holds ``name``)."""
    # Never echoed: it is often the key itself, pasted in the wrong place.
    if not _ENV_NAME.fullmatch(name) or _KEY_SHAPE.fullmatch(name):
        raise ValueError("must name an environment variable (such as DIFY_APP_KEY) that holds the key, not the key")
    return name


#: A config or spec field naming the environment variable that holds a key (``api_key_env``).
EnvName = Annotated[str, AfterValidator(env_name)]


def declare(*env_names: str | None) -> None:
    """Treat these environment variables as secrets whatever their names (``api_key_env``)."""
    _declared.update(n for n in env_names if n)


def secret_values() -> dict[str, str]:
    """Environment variable name → value, for every variable that holds a secret."""
    return {
        name: value
        for name, value in os.environ.items()
        if value and len(value) >= _MIN_LENGTH and (name in _declared or _SECRET_NAME.search(name))
    }


def secret_digest(*values: str) -> str:
    """A short one-way digest of secrets, for telling them apart (which Dify app a key selects) in
    local cache keys; it is not logged, and the secrets cannot be read back from it."""
    return hashlib.sha256("\0".join(("ragtrack-secret", *values)).encode()).hexdigest()[:16]


def without_credentials(url: str) -> str:
    """``url`` without the credentials some users put in it (``postgresql://user:pw@host/db``,
    ``…/v1?api-key=…``: the value becomes ``***``): for URLs that are printed, logged or used as keys."""
    url = re.sub(r"//[^/@]*@", "//", url)
    base, mark, query = url.partition("?")
    if not mark:
        return url
    pairs = [p.partition("=") for p in query.split("&")]
    return base + "?" + "&".join(k + eq + ("***" if eq and _SECRET_PARAM.search(k) else v) for k, eq, v in pairs)


def redact(text: str) -> str:
    """``text`` with every secret value and key-shaped token replaced by ``***`` (for what a server
    or model says, which may quote any key)."""
    return _KEY_SHAPE.sub("***", redact_values(text))


def redact_values(text: str) -> str:
    """``text`` with the value of every secret replaced by ``***``; key-shaped words are kept (for
    ragtrack's own text — params, descriptions, errors — where ``key-…`` is as likely a passage ID)."""
    for value in secret_values().values():
        text = text.replace(value, "***")
    return text


def ensure_clean(text: str, where: str) -> None:
    """Refuse to write ``text`` (bound for ``where``) when it holds a secret value.

    Used for artifacts logged verbatim, where redacting would silently change
    what the user asked to record.
    """
    leaked = sorted(name for name, value in secret_values().items() if value in text)
    if leaked:
        raise RagtrackError(
            f"{where} contains the value of ${leaked[0]}; refusing to write a secret to the tracking store"
        )
