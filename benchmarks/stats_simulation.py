"""Do ragtrack's intervals, corrections and gate do what they claim? A simulation with a known truth.

Generates synthetic paired evals (``ragtrack.testing.stats_simulation``: a true gain, judge
noise, document clusters — equal and unequal, items on two documents, 12 items at the
ceiling, a judge whose bias differs between versions) and prints:

* the share of printed 95 % intervals that cover the true Δ, per regime (target 93–97 %),
  how many evals printed none (no variation), and what clustering by the first document
  only, or not at all, costs on items that span two documents;
* how much wider plain PPI (λ = 1) is than the labels alone, and the tuned PPI++ (never);
* the family-wise false-positive rate of compare's marks under Δ = 0 for every metric,
  unadjusted and after Holm (target ≤ 5 %);
* per gate design (independent items, 8 and 16 document clusters): the printed MDE, how often
  the correctness test detects a true Δ equal to it (target 75–85 %), and how often the interval
  gate promotes a null challenger (≤ 5 %) and one at twice the MDE (≥ 80 %), also among the
  decisions that printed a groundedness non-inferiority power of 80 % or more (the gate cannot do
  better than that power: docs/statistics.md).

    python benchmarks/stats_simulation.py [--runs 1000]

Each figure comes with its 95 % binomial (Clopper–Pearson) interval over the runs.
About two minutes of CPU at 1 000 runs.
"""

from __future__ import annotations

import argparse
import time

from scipy.stats import binomtest

from ragtrack.testing import stats_simulation as sim


def share(k: int, n: int) -> str:
    ci = binomtest(k, n).proportion_ci()
    return f"{k / n:6.1%}  [{ci.low:.1%}, {ci.high:.1%}]  ({k}/{n})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    runs = parser.parse_args().runs

    print(f"coverage of the true Δ by printed 95% intervals, {runs} simulated evals each (target 93–97%)")
    for kind in sim.KINDS:
        started = time.monotonic()
        printed, covered = sim.coverage(kind, runs)
        none = f"   {runs - printed} printed none (no variation)" if printed < runs else ""
        print(f"  {kind:<52} {share(covered, printed)}   {time.monotonic() - started:5.1f} s{none}", flush=True)
    linked = "half the items on two documents"
    for by, what in (("first", "clustered by the first document only"), ("item", "each item alone")):
        printed, covered = sim.coverage(linked, runs, by=by)
        print(f"  ({linked}: {what:<36}) {share(covered, printed)}")

    wider, plain, tuned = sim.ppi_widths(runs)
    print(f"\nPPI width over the labels alone's ({runs} evals of the PPI design)")
    print(f"  plain PPI (λ = 1) {plain:.2f}×; tuned PPI++ {tuned:.2f}×, wider in {wider} of {runs}")

    family = runs // 2
    raw, adjusted = sim.family_false_positives(family)
    tests = sim.METRICS * sim.SCOPES
    print(f"\nfamily-wise false positives under Δ = 0 ({tests} tests per eval, {family} evals; target ≤ 5%)")
    print(f"  unadjusted p < 0.05 anywhere   {share(raw, family)}")
    print(f"  Holm-adjusted p < 0.05         {share(adjusted, family)}")

    print(f"\nthe MDE and the interval gate ({runs} evals each; groundedness truly unchanged, tolerance 0.5)")
    for name, design in sim.GATE_DESIGNS.items():
        mde = sim.printed_mde(design)
        at_mde = sim.gate_promotions(runs, True, seed=1, design=design, gain=mde).detected
        null = sim.gate_promotions(runs, True, seed=2, design=design).promoted
        twice = sim.gate_promotions(runs, True, seed=3, design=design, gain=2 * mde)
        print(f"  {name} (printed MDE {mde:.3f})")
        print(f"    correctness test detects Δ = MDE (75–85%)  {share(at_mde, runs)}")
        print(f"    gate promotes a null challenger (≤ 5%)     {share(null, runs)}")
        print(f"    correctness test detects Δ = 2 × MDE       {share(twice.detected, runs)}")
        print(f"    gate promotes Δ = 2 × MDE (≥ 80%)          {share(twice.promoted, runs)}")
        print(f"      (groundedness non-inferiority power the decisions printed: {twice.power:.1%})")
        if twice.powered:
            print(
                f"      where that power was ≥ 80%: promoted {share(twice.promoted_powered, twice.powered)}", flush=True
            )
    mean_rule = sim.gate_promotions(runs // 4, False).promoted
    print(f"  mean rule (the spec's default), null challenger   {share(mean_rule, runs // 4)}")


if __name__ == "__main__":
    main()
