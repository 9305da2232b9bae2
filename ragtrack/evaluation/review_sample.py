"""Which item traces go to people for labelling: a sample stratified by question type.

The rule (documented in docs/mlflow.md, "Label in the MLflow UI"): ``size`` items split over the
types in proportion to how many items each has (largest remainder; every type gets one when
``size`` allows, so no type goes unlabelled); within a type, items in the order of
``sha256(seed:id)``: the same set and seed give the same sample, and a larger ``size`` keeps the
smaller one's items (labels already given stay in it). Pure: IDs and types in, IDs out.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from collections.abc import Sequence

#: Labelled items a review queue asks for unless told otherwise: twenty gives the prediction-powered
#: interval the spread of the judge's error on a few items of every type (it needs at least two).
DEFAULT_SIZE = 20


def stratified_sample(items: Sequence[tuple[str, str]], size: int, seed: str = "ragtrack") -> list[str]:
    """``size`` of ``items`` (item ID, type), stratified by type as the module says; all when fewer."""
    if size < 1:
        raise ValueError(f"the sample size must be at least 1, got {size}")
    by_type: dict[str, list[str]] = defaultdict(list)
    for item_id, kind in items:
        by_type[kind].append(item_id)
    for ids in by_type.values():
        ids.sort(key=lambda i: hashlib.sha256(f"{seed}:{i}".encode()).hexdigest())
    total = sum(len(ids) for ids in by_type.values())
    if size >= total:
        return [i for ids in by_type.values() for i in ids]
    types = sorted(by_type)
    floor_one = size >= len(types)
    quota = {t: len(by_type[t]) * size / total for t in types}
    take = {t: max(1 if floor_one else 0, math.floor(quota[t])) for t in types}
    # Largest remainder until the sizes add up (or, after the floor of one, the largest quotas give back).
    by_remainder = sorted(types, key=lambda t: (-(quota[t] - math.floor(quota[t])), t))
    while sum(take.values()) < size:
        t = next(t for t in by_remainder if take[t] < len(by_type[t]))
        take[t] += 1
        by_remainder.remove(t)
        by_remainder.append(t)
    while sum(take.values()) > size:
        t = max((t for t in types if take[t] > 1), key=lambda t: (take[t] - quota[t], t))
        take[t] -= 1
    return [i for t in types for i in by_type[t][: take[t]]]
