"""Synthetic paired evals with a known truth, to check ragtrack's statistics by simulation.

Each simulated eval is a golden set of ``items`` questions over ``documents`` (the
clusters), answered by two versions and scored 1–5 by a noisy judge:

* an item's true quality under version A is ``base`` + its documents' effect + an item
  effect; under B it is A's plus the true gain ``delta``, plus its documents' effect on
  the gain (a chunking change helps or hurts all questions of one document alike) and an
  item effect on it;
* ``sizes`` gives unequal clusters (items per document); ``linked`` is the share of items
  that also draw on a second document (its pair, document d xor 1), so that items sharing
  a document are dependent across first documents — the reason clusters are the
  connected components of shared documents (:func:`ragtrack.evaluation.clustering.components`);
* each judge verdict is the true quality plus judge noise and the judge's bias
  (``judge_bias`` for A, ``judge_bias_b`` for B: a judge that favours one version),
  rounded and clipped to 1–5, ``samples`` times per item; ``base`` near 5 puts most
  scores at the ceiling (ties);
* a human label, where there is one, is the true quality rounded and clipped, with no
  judge bias (the target of prediction-powered inference).

The true Δ of the verdicts (what an interval should cover) is the expectation of the
item's mean verdict difference, computed here by a large Monte Carlo run of the same
process over many documents; for PPI it is the expected human-label difference. Used by
``benchmarks/stats_simulation.py`` (the full figures) and ``tests/test_stats_simulation.py``
(fewer runs, with binomial tolerances).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ragtrack.evaluation import metrics as m
from ragtrack.evaluation.clustering import components
from ragtrack.evaluation.multiplicity import holm
from ragtrack.evaluation.power import power_of
from ragtrack.evaluation.ppi import ppi_mean
from ragtrack.evaluation.promotion import Champion, Rule, decide
from ragtrack.evaluation.stats import PairedDifference, compare_paired
from ragtrack.records import RunSummary


@dataclass(frozen=True)
class Design:
    items: int = 48
    documents: int = 16
    delta: float = 0.4  # true gain on the latent 1–5 scale
    base: float = 3.0  # mean latent quality of A (near 5: ties at the ceiling)
    document_sd: float = 0.5  # document effect on quality (shared by both versions)
    item_sd: float = 0.8
    gain_document_sd: float = 0.4  # document effect on the gain: what clustering is for
    gain_item_sd: float = 0.4
    judge_sd: float = 0.0  # judge noise per verdict
    judge_bias: float = 0.0  # added to every verdict of A (a lenient judge: > 0)
    judge_bias_b: float | None = None  # added to B's verdicts (None: the same as A's)
    samples: int = 1  # judge verdicts per item and version
    labelled: int = 0  # items with a human label on both versions (PPI)
    sizes: tuple[int, ...] = ()  # items per document, unequal clusters (sum = items; () : spread evenly)
    linked: float = 0.0  # share of items that also draw on a second document (d xor 1)


def _documents(rng: np.random.Generator, d: Design, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Each item's first and second document (the second equal to the first when it has one only)."""
    if d.sizes and n == d.items:
        first = np.repeat(np.arange(len(d.sizes)), d.sizes)
    elif n == d.items:
        first = np.arange(n) % d.documents
    else:
        first = rng.integers(0, d.documents, size=n)
    second = np.where(rng.random(n) < d.linked, np.minimum(first ^ 1, d.documents - 1), first)
    return first, second


def _quality(rng: np.random.Generator, d: Design, n: int):
    """Documents and true qualities of A and B for ``n`` items."""
    first, second = _documents(rng, d, n)
    docs = max(d.documents, len(d.sizes))
    doc_effect = rng.normal(0, d.document_sd, docs)
    gain_effect = rng.normal(0, d.gain_document_sd, docs)
    qa = d.base + (doc_effect[first] + doc_effect[second]) / 2 + rng.normal(0, d.item_sd, n)
    qb = qa + d.delta + (gain_effect[first] + gain_effect[second]) / 2 + rng.normal(0, d.gain_item_sd, n)
    return first, second, qa, qb


def _score(rng: np.random.Generator, q: np.ndarray, d: Design, k: int, bias: float) -> np.ndarray:
    """k judge verdicts per item: (n, k) integers 1–5."""
    noise = rng.normal(0, d.judge_sd, (q.size, k)) if d.judge_sd else np.zeros((q.size, k))
    return np.clip(np.rint(q[:, None] + bias + noise), 1, 5)


def _bias_b(d: Design) -> float:
    return d.judge_bias if d.judge_bias_b is None else d.judge_bias_b


def _human(q: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(q), 1, 5)


def true_delta(d: Design, human: bool = False, n: int = 400_000, seed: int = 12345) -> float:
    """The expected difference of the judge's verdicts (or of the human labels) under ``d``."""
    rng = np.random.default_rng(seed)
    big = replace(d, documents=max(d.documents, len(d.sizes), 2) * 1000, sizes=())
    *_, qa, qb = _quality(rng, big, n)
    if human:
        return float(np.mean(_human(qb) - _human(qa)))
    return float(np.mean(_score(rng, qb, d, 1, _bias_b(d)) - _score(rng, qa, d, 1, d.judge_bias)))


def latent_for(d: Design, target: float) -> float:
    """The latent ``delta`` whose verdicts' true Δ is ``target`` (rounding and clipping bend the scale):
    secant steps on :func:`true_delta`."""
    x0, x1 = target, target * 1.2 + 0.05
    f0, f1 = (true_delta(replace(d, delta=x), n=200_000) - target for x in (x0, x1))
    for _ in range(6):
        if abs(f1) < 1e-3 or f1 == f0:
            break
        x0, x1, f0 = x1, x1 - f1 * (x1 - x0) / (f1 - f0), f1
        f1 = true_delta(replace(d, delta=x1), n=200_000) - target
    return x1


@dataclass(frozen=True)
class SimulatedEval:
    first: np.ndarray  # each item's first document
    clusters: np.ndarray  # connected components of shared documents
    a: np.ndarray  # (n, k) verdicts
    b: np.ndarray
    human_a: np.ndarray
    human_b: np.ndarray

    @property
    def diffs(self) -> np.ndarray:
        return self.b.mean(axis=1) - self.a.mean(axis=1)


def simulate(rng: np.random.Generator, d: Design) -> SimulatedEval:
    first, second, qa, qb = _quality(rng, d, d.items)
    clusters = np.array(components([{int(x), int(y)} for x, y in zip(first, second, strict=True)]))
    a = _score(rng, qa, d, d.samples, d.judge_bias)
    return SimulatedEval(first, clusters, a, _score(rng, qb, d, d.samples, _bias_b(d)), _human(qa), _human(qb))


def paired(e: SimulatedEval, by: str = "clusters") -> PairedDifference:
    """compare's paired difference of one simulated eval (its interval: the sign-flip test is skipped):
    clustered by shared documents (``clusters``), by the first document only (``first``), or each item
    alone (``item``)."""
    clusters = {"clusters": e.clusters, "first": e.first, "item": None}[by]
    return compare_paired(e.a.mean(axis=1), e.b.mean(axis=1), clusters=clusters, test=False)


#: The interval kinds the benchmark checks, each with the design it is checked under.
KINDS: dict[str, Design] = {
    "independent items": Design(documents=48, gain_document_sd=0.0, document_sd=0.0),
    "16 document clusters": Design(),
    "8 unequal clusters": Design(sizes=(12, 9, 8, 6, 5, 4, 2, 2), documents=8),
    "5 unequal clusters": Design(sizes=(16, 12, 9, 7, 4), documents=5),
    "half the items on two documents": Design(linked=0.5),
    "n = 12, ties at the ceiling": Design(items=12, documents=12, base=4.3, delta=0.3),
    "3 judge samples": Design(judge_sd=0.9, samples=3),
    "prediction-powered Δ, judge bias differs by version": Design(
        documents=8, judge_sd=0.6, judge_bias=0.6, judge_bias_b=0.2, labelled=24
    ),
}
PPI = "prediction-powered Δ, judge bias differs by version"


def interval(kind: str, e: SimulatedEval, d: Design) -> tuple[float, float] | None:
    """The 95 % interval of Δ that ``kind`` names, on one simulated eval; None when none is printed
    (no variation)."""
    if kind == PPI or d.labelled:
        f, y, n = e.diffs, e.human_b - e.human_a, d.labelled
        # items are in random order: the first n are a random subset
        est = ppi_mean(f[n:], f[:n], y[:n], clusters_unlabelled=e.clusters[n:], clusters_labelled=e.clusters[:n])
        return est.ci_low, est.ci_high
    r = paired(e)
    return (r.ci_low, r.ci_high) if r.varies else None


def coverage(kind: str, runs: int, seed: int = 0, design: Design | None = None, by: str = "") -> tuple[int, int]:
    """Of ``runs`` simulated evals, how many print a 95 % interval (of ``kind``), and how many of those
    cover the true Δ. ``by`` clusters another way (``first``, ``item``) for contrast."""
    d = design or KINDS[kind]
    truth = true_delta(d, human=kind == PPI)
    rng = np.random.default_rng(seed)
    printed = covered = 0
    for _ in range(runs):
        e = simulate(rng, d)
        if by:
            r = paired(e, by)
            found = (r.ci_low, r.ci_high) if r.varies else None
        else:
            found = interval(kind, e, d)
        if found is not None:
            printed += 1
            covered += found[0] <= truth <= found[1]
    return printed, covered


def ppi_widths(runs: int, seed: int = 0, design: Design | None = None) -> tuple[int, float, float]:
    """Over ``runs`` evals of the PPI design: how often the tuned interval is wider than the labels alone
    (never, by construction), and the mean widths of plain PPI (λ = 1) and of the tuned one over the labels
    alone's."""
    d = design or KINDS[PPI]
    rng = np.random.default_rng(seed)
    wider, plain, tuned = 0, [], []
    for _ in range(runs):
        e = simulate(rng, d)
        f, y, n = e.diffs, e.human_b - e.human_a, d.labelled
        args = (f[n:], f[:n], y[:n])
        where = {"clusters_unlabelled": e.clusters[n:], "clusters_labelled": e.clusters[:n]}
        est, one = ppi_mean(*args, **where), ppi_mean(*args, **where, lam=1.0)
        alone = est.labels_only[1] - est.labels_only[0]
        wider += est.ci_high - est.ci_low > alone + 1e-12
        plain.append((one.ci_high - one.ci_low) / alone)
        tuned.append((est.ci_high - est.ci_low) / alone)
    return wider, float(np.mean(plain)), float(np.mean(tuned))


# ------------------------------------------------------------------ family-wise errors
METRICS, SCOPES = 8, 4  # a family like compare's: 8 metrics, over all items and 3 of 4 types


def family_false_positives(runs: int, seed: int = 0, items: int = 48, documents: int = 12) -> tuple[int, int]:
    """Under Δ = 0 for every metric: in how many of ``runs`` evals does at least one test come out
    significant, without correction and after Holm? (Metrics of one item are correlated, as
    recall, MRR and correctness are; types are item subsets.)"""
    rng = np.random.default_rng(seed)
    any_raw = any_holm = 0
    for run in range(runs):
        doc = np.arange(items) % documents
        types = np.arange(items) % SCOPES
        shared = rng.normal(0, 1, items)[:, None]
        doc_effect = rng.normal(0, 0.5, (documents, METRICS))[doc]
        d = 0.6 * shared + 0.8 * rng.normal(0, 1, (items, METRICS)) + doc_effect
        ps = []
        for metric in range(METRICS):
            for scope in range(SCOPES):
                keep = np.ones(items, bool) if scope == 0 else types == scope
                r = compare_paired(np.zeros(keep.sum()), d[keep, metric], seed=run, clusters=doc[keep], resamples=500)
                ps.append(r.p_value)
        any_raw += min(ps) < 0.05
        any_holm += min(holm(ps)) < 0.05
    return any_raw, any_holm


# ------------------------------------------------------------------ the gate and the MDE
def _summary(version: str, run_id: str) -> RunSummary:
    return RunSummary(run_id, version, "g", "judge", "0.5", False, run_id, {m.ITEMS: 48.0})


#: The gate's designs: the MDE is checked where one is printed (six clusters or more).
GATE_DESIGNS: dict[str, Design] = {
    "independent items": KINDS["independent items"],
    "8 document clusters": Design(documents=8),
    "16 document clusters": Design(),
}


def printed_mde(d: Design, runs: int = 200, seed: int = 99) -> float:
    """The mean minimum detectable Δ compare prints for correctness on evals of design ``d``."""
    rng = np.random.default_rng(seed)
    found = [power_of("correctness", paired(simulate(rng, d))).mde for _ in range(runs)]
    return float(np.mean([x for x in found if x is not None]))


@dataclass(frozen=True)
class GateRuns:
    """What the rule did with ``runs`` simulated challengers (:func:`gate_promotions`)."""

    runs: int
    promoted: int
    detected: int  # the correctness test alone: its interval's lower bound above 0
    power: float  # the mean groundedness non-inferiority power the decisions printed
    powered: int  # decisions that printed that power at 80 % or more
    promoted_powered: int  # of those, promoted


def gate_promotions(
    runs: int, require_interval: bool, seed: int = 0, design: Design | None = None, gain: float = 0.0
) -> GateRuns:
    """``runs`` challengers whose true correctness gain (on the verdicts' scale) is ``gain`` and whose
    groundedness is unchanged, decided by the spec's mean rule or the interval gate: how many it promotes,
    how many the correctness test alone detects, the groundedness non-inferiority power the decisions
    printed, and how the gate fared where that power was 80 % or more (where a fixed tolerance lets it
    keep the promise of 80 % at twice the MDE, docs/statistics.md)."""
    d = design or KINDS["16 document clusters"]
    latent = latent_for(d, gain) if gain else 0.0
    rng = np.random.default_rng(seed)
    rule = Rule(require_interval=require_interval)
    champion = Champion("1", "v1", _summary("v1", "champion-run"))
    promoted = detected = powered = promoted_powered = 0
    printed = []
    for _ in range(runs):
        both = {
            "correctness": paired(simulate(rng, replace(d, delta=latent))),
            "groundedness": paired(simulate(rng, replace(d, delta=0.0))),
        }
        decision = decide(_summary("v2", "challenger-run"), champion, rule, both)
        promoted += decision.promoted
        detected += both["correctness"].varies and both["correctness"].ci_low > 0
        printed.append(decision.figures.get("groundedness_power", 0.0))
        if printed[-1] >= 0.80:
            powered += 1
            promoted_powered += decision.promoted
    return GateRuns(runs, promoted, detected, float(np.mean(printed)), powered, promoted_powered)
