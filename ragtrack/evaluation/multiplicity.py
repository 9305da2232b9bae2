"""Many tests at once: Holm's correction of the p-values ``compare`` prints.

``ragtrack compare`` tests every metric in every scope (7 retrieval and 4 judge
metrics, over all items and per type: dozens of tests). At p < 0.05 each, one in
twenty true nulls comes out "significant" by chance, so something always looks
significant. Holm's step-down procedure (Holm 1979, "A Simple Sequentially
Rejective Multiple Test Procedure", *Scandinavian Journal of Statistics* 6:65–70)
keeps the chance of *any* false mark (the family-wise error rate) at 5 %, and is
uniformly more powerful than Bonferroni.

The promotion rule's two tests (correctness gain, groundedness not regressed, over
all items) are named in advance and decided together as an intersection-union test
(promote only if both hold), which needs no correction; they are left out of the
family so that the gate is not diluted by the secondary metrics.
"""

from __future__ import annotations

from collections.abc import Sequence


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values, in the input order: compare each with α as it stands.

    Sorted ascending, p_(j) is multiplied by (m − j + 1); each adjusted value is the running
    maximum of those products (so the order of rejections is kept), capped at 1.
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted
