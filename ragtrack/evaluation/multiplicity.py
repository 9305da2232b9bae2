"""Many tests at once: Holm's correction of the p-values ``compare`` prints.

``ragtrack compare`` tests every metric in every scope (7 retrieval and 4 judge
metrics, over all items and per type: dozens of tests). At p < 0.05 each, one in
twenty true nulls comes out "significant" by chance, so something always looks
significant. Holm's step-down procedure (Holm 1979, "A Simple Sequentially
Rejective Multiple Test Procedure", *Scandinavian Journal of Statistics* 6:65–70)
keeps the chance of *any* false mark (the family-wise error rate) at 5 %, and is
uniformly more powerful than Bonferroni.

Every row of compare's table is in the one family, the promotion rule's metrics (◆)
included: a star is a claim like any other. The promotion gate itself does not read
the stars: it decides on two tests named in advance — correctness superiority and
groundedness non-inferiority, each one-sided at 2.5 % (the lower bound of a 95 %
interval) — together as an intersection-union test (promote only if both hold),
which needs no correction (Berger 1982, *Technometrics* 24:295–300).
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
