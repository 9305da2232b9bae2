"""Can this golden set see the difference you care about? Power and the minimum detectable Δ.

Before trusting "no significant difference", ask whether the set could have shown
one. The gate's test is the t interval of :mod:`ragtrack.evaluation.stats`: the
clustered standard error SE with C − 1 degrees of freedom (C clusters). It detects a
true difference Δ (its 95 % interval's lower bound above 0) with probability

    power(Δ) = P(T_{C−1, Δ/SE} > t_{C−1, 0.975})        (noncentral t)

and with 80 % power when, approximately,

    Δ ≥ (t_{C−1, 0.975} + t_{C−1, 0.80}) · SE           (the minimum detectable effect, MDE)

— 2.80 · SE for many clusters, 3.26 · SE for 8, 4.0 · SE for 5. The normal z the
first version used (2.80 at any C) printed an MDE the test reached 48 % of the
time with 6 clusters (Miller 2024, "Adding Error Bars to Evals", §5, has the
normal form; the t form is the usual small-sample one). Below six clusters the
sign-flip test behind compare's marks cannot reach p < 0.05 (its smallest p is
2 / 2^C), so no MDE is printed there, and the reason is.

Items needed for a Δ the user names depend on where the new items come from. The
variance of the mean has a part between clusters (``between``, estimated by
:func:`ragtrack.evaluation.stats.between_share`) and a part within:

* **new documents** (the set grown alike: same items per document) shrink all of it:
  SE ∝ 1 / √N, and C grows with N;
* **new items on the existing documents** shrink only the within part: SE² · (b +
  (1 − b) / k) for k times the items, which never falls below SE² · b — a Δ below
  that floor cannot be reached on these documents at all, and that is said.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ragtrack.evaluation.stats import MIN_TESTABLE_UNITS, PairedDifference

ALPHA, POWER = 0.05, 0.80


def multiplier(df: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """t_{df, 1−α/2} + t_{df, power}: how many standard errors the MDE is (2.80 for large df, 3.26 at 7)."""
    from scipy.stats import t  # here, not at import: promotion and the listing commands import this module

    return float(t.ppf(1 - alpha / 2, df) + t.ppf(power, df))


def detection_power(delta: float, se: float, df: float, alpha: float = ALPHA) -> float:
    """The chance the 95 % t interval's lower bound is above 0 when the true difference is ``delta``
    (noncentral t with ``df`` degrees of freedom and noncentrality Δ / SE)."""
    if se <= 0 or df < 1:
        return float("nan")
    from scipy.stats import nct, t

    return float(nct.sf(t.ppf(1 - alpha / 2, df), df, delta / se))


@dataclass(frozen=True)
class Power:
    """The minimum detectable Δ of one metric on a set of ``n`` items in ``clusters`` clusters, and the
    items a target Δ needs; ``reason`` says why there is no MDE (``mde`` None)."""

    metric: str
    n: int
    clusters: int
    se: float
    mde: float | None
    reason: str = ""
    delta: float | None = None  # the Δ the user asked about
    items_new_documents: int | None = None  # for ``delta``, growing the set alike (new documents)
    items_same_documents: int | None = None  # for ``delta``, new items on these documents; None: unreachable

    @property
    def estimable(self) -> bool:
        return self.mde is not None

    def detects(self, delta: float) -> bool:
        """Whether an observed |Δ| is at least the MDE (a smaller one may be noise at this size)."""
        return self.mde is not None and abs(delta) >= self.mde


def power_of(metric: str, diff: PairedDifference, delta: float | None = None) -> Power:
    """The MDE of ``diff``'s design (its clustered SE, its clusters); with ``delta``, the items it needs."""
    if delta is not None and delta <= 0:
        raise ValueError(f"the difference to detect must be positive, got {delta:g}")
    c, se = diff.units, diff.se
    if not diff.varies:
        return Power(metric, diff.n, c, se, None, diff.no_variation or "no variation", delta)
    if c < MIN_TESTABLE_UNITS:
        why = f"{c} clusters: too few for any test at 5% (a sign-flip test needs {MIN_TESTABLE_UNITS})"
        return Power(metric, diff.n, c, se, None, why, delta)
    mde = multiplier(diff.df) * se
    if delta is None:
        return Power(metric, diff.n, c, se, mde)
    return Power(metric, diff.n, c, se, mde, "", delta, new_documents(diff, delta), same_documents(diff, delta))


def new_documents(diff: PairedDifference, delta: float) -> int:
    """Items needed for ``delta`` when the set grows alike (items per cluster kept): the smallest N whose
    SE · √(n/N) times the t multiplier at its clusters (C · N/n) reaches ``delta``."""
    n, c = diff.n, diff.units
    need = max(2, math.ceil(n * (multiplier(diff.df) * diff.se / delta) ** 2))
    for _ in range(20):  # the multiplier falls as C grows with N: a few fixed-point steps settle it
        grown = diff.df * math.ceil(c * need / n) / c  # the df grow with the clusters, in proportion
        following = max(2, math.ceil(n * (multiplier(max(grown, 1.0)) * diff.se / delta) ** 2))
        if following == need:
            break
        need = following
    return need


def same_documents(diff: PairedDifference, delta: float) -> int | None:
    """Items needed for ``delta`` from new items on the existing clusters (C fixed): the k with
    multiplier · SE · √(b + (1 − b)/k) ≤ Δ, times n; None when the between-cluster part alone is too much."""
    m, b = multiplier(diff.df), diff.between
    target = (delta / (m * diff.se)) ** 2  # the share of today's variance that would be small enough
    if target <= b:
        return None
    return max(2, math.ceil(diff.n * (1 - b) / (target - b)))
