"""How the public API checks its arguments, one rule for every function of :mod:`ragtrack.api`."""

from __future__ import annotations

from pydantic import ConfigDict, validate_call

#: The public API checks its arguments' types on entry: a misplaced argument (``evaluate(1)``) is named
#: instead of failing deep inside, and nothing is coerced (``limit="5"`` or ``True`` is a mistake).
checked_arguments = validate_call(config=ConfigDict(strict=True))
