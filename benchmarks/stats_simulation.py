"""Do ragtrack's intervals, corrections and gate do what they claim? A simulation with a known truth.

Generates synthetic paired evals (``ragtrack.testing.stats_simulation``: 48 items over
16 documents, a true gain, judge noise, document clusters) and prints:

* the share of 95 % intervals that cover the true Δ, per interval kind (target 93–97 %),
  and the plain interval's coverage on clustered data for contrast;
* the family-wise false-positive rate of compare's marks under Δ = 0 for every metric,
  unadjusted and after Holm (target ≤ 5 %);
* how often a challenger with no true gain is promoted: by the spec's mean rule, and with
  ``[promotion] require_interval`` (target ≤ 5 %).

    python benchmarks/stats_simulation.py [--runs 1000] [--resamples 2000]

Each figure comes with its 95 % binomial (Clopper–Pearson) interval over the runs.
About five minutes at 1 000 runs on two cores (the two-level bootstrap is most of it).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

from scipy.stats import binomtest

from ragtrack.testing import stats_simulation as sim


def share(k: int, n: int) -> str:
    ci = binomtest(k, n).proportion_ci()
    return f"{k / n:6.1%}  [{ci.low:.1%}, {ci.high:.1%}]  ({k}/{n})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--resamples", type=int, default=2000)
    args = parser.parse_args()
    runs = args.runs

    print(f"coverage of the true Δ by 95% intervals, {runs} simulated evals each (target 93–97%)")
    for kind in sim.KINDS:
        started = time.monotonic()
        k = sim.coverage(kind, runs, args.resamples)
        print(f"  {kind:<30} {share(k, runs)}   {time.monotonic() - started:5.1f} s")
    clustered = sim.KINDS["clustered bootstrap"]
    k = sim.coverage("paired bootstrap", runs, args.resamples, design=clustered)
    print(f"  {'(plain interval, clustered data)':<30} {share(k, runs)}   ← what ignoring documents costs")

    family = runs // 2
    raw, adjusted = sim.family_false_positives(family)
    tests = sim.METRICS * sim.SCOPES
    print(f"\nfamily-wise false positives under Δ = 0 ({tests} tests per eval, {family} evals; target ≤ 5%)")
    print(f"  unadjusted p < 0.05 anywhere   {share(raw, family)}")
    print(f"  Holm-adjusted p < 0.05         {share(adjusted, family)}")

    print(f"\nchallengers with no true gain that are promoted ({runs} evals; target ≤ 5% with the gate)")
    mean_rule = sim.gate_promotions(runs // 4, require_interval=False, resamples=args.resamples)
    print(f"  mean rule (the spec's default) {share(mean_rule, runs // 4)}")
    gated = sim.gate_promotions(runs, require_interval=True, resamples=args.resamples)
    print(f"  [promotion] require_interval   {share(gated, runs)}")
    print(f"\ndesigns: {replace(clustered, delta=clustered.delta)}")


if __name__ == "__main__":
    main()
