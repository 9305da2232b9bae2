"""Synthetic paired evals with a known truth, to check ragtrack's statistics by simulation.

Each simulated eval is a golden set of ``items`` questions spread over ``documents``
(the clusters), answered by two versions and scored 1–5 by a noisy judge:

* an item's true quality under version A is 3 + a document effect + an item effect;
  under B it is A's plus the true gain ``delta``, plus a document effect on the gain
  (a chunking change helps or hurts all questions of one document alike) and an
  item effect on it;
* each judge verdict is the true quality plus judge noise (and ``judge_bias``),
  rounded and clipped to 1–5, ``samples`` times per item;
* a human label, where there is one, is the true quality rounded and clipped, with
  no judge bias (the target of prediction-powered inference).

The true Δ of the verdicts (what an interval should cover) is the expectation of
the item's mean verdict difference, computed here by a large Monte Carlo run of the
same process; for PPI it is the expected human-label difference. Used by
``benchmarks/stats_simulation.py`` (the full figures) and ``tests/test_stats_simulation.py``
(fewer runs, with binomial tolerances).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ragtrack.evaluation import metrics as m
from ragtrack.evaluation.multiplicity import holm
from ragtrack.evaluation.ppi import ppi_mean
from ragtrack.evaluation.promotion import Champion, Rule, decide
from ragtrack.evaluation.stats import compare_paired
from ragtrack.records import RunSummary


@dataclass(frozen=True)
class Design:
    items: int = 48
    documents: int = 16
    delta: float = 0.4  # true gain on the latent 1–5 scale
    document_sd: float = 0.5  # document effect on quality (shared by both versions)
    item_sd: float = 0.8
    gain_document_sd: float = 0.4  # document effect on the gain: what clustering is for
    gain_item_sd: float = 0.4
    judge_sd: float = 0.0  # judge noise per verdict
    judge_bias: float = 0.0  # added to every verdict (a lenient judge: > 0)
    samples: int = 1  # judge verdicts per item and version
    labelled: int = 0  # items with a human label on both versions (PPI)


def _quality(rng: np.random.Generator, d: Design, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Documents (clusters) and true qualities of A and B for ``n`` items."""
    doc = rng.integers(0, d.documents, size=n) if n != d.items else np.arange(n) % d.documents
    doc_effect = rng.normal(0, d.document_sd, d.documents)
    gain_effect = rng.normal(0, d.gain_document_sd, d.documents)
    qa = 3 + doc_effect[doc] + rng.normal(0, d.item_sd, n)
    qb = qa + d.delta + gain_effect[doc] + rng.normal(0, d.gain_item_sd, n)
    return doc, qa, qb


def _score(rng: np.random.Generator, q: np.ndarray, d: Design, k: int) -> np.ndarray:
    """k judge verdicts per item: (n, k) integers 1–5."""
    noise = rng.normal(0, d.judge_sd, (q.size, k)) if d.judge_sd else np.zeros((q.size, k))
    return np.clip(np.rint(q[:, None] + d.judge_bias + noise), 1, 5)


def _human(q: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(q), 1, 5)


def true_delta(d: Design, human: bool = False, n: int = 400_000, seed: int = 12345) -> float:
    """The expected difference of the judge's verdicts (or of the human labels) under ``d``."""
    rng = np.random.default_rng(seed)
    big = replace(d, documents=max(d.documents, 1) * 1000)
    _, qa, qb = _quality(rng, big, n)
    if human:
        return float(np.mean(_human(qb) - _human(qa)))
    return float(np.mean(_score(rng, qb, d, 1) - _score(rng, qa, d, 1)))


@dataclass(frozen=True)
class SimulatedEval:
    clusters: np.ndarray
    a: np.ndarray  # (n, k) verdicts
    b: np.ndarray
    human_a: np.ndarray
    human_b: np.ndarray

    @property
    def diffs(self) -> np.ndarray:
        return self.b.mean(axis=1) - self.a.mean(axis=1)

    @property
    def samples(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return list(zip(self.a, self.b, strict=True))


def simulate(rng: np.random.Generator, d: Design) -> SimulatedEval:
    doc, qa, qb = _quality(rng, d, d.items)
    return SimulatedEval(doc, _score(rng, qa, d, d.samples), _score(rng, qb, d, d.samples), _human(qa), _human(qb))


#: The interval kinds the benchmark checks, each with the design it is checked under.
KINDS: dict[str, Design] = {
    "paired bootstrap": Design(documents=48, gain_document_sd=0.0, document_sd=0.0),
    "clustered bootstrap": Design(),
    "two-level (3 judge samples)": Design(judge_sd=0.9, samples=3),
    "prediction-powered Δ": Design(judge_sd=0.6, judge_bias=0.6, labelled=24),
}


def interval(kind: str, e: SimulatedEval, d: Design, resamples: int, seed: int) -> tuple[float, float]:
    """The 95 % interval of Δ that ``kind`` names, on one simulated eval."""
    if kind == "paired bootstrap":
        r = compare_paired(e.a.mean(axis=1), e.b.mean(axis=1), seed=seed, resamples=resamples)
    elif kind == "clustered bootstrap":
        r = compare_paired(e.a.mean(axis=1), e.b.mean(axis=1), seed=seed, clusters=e.clusters, resamples=resamples)
    elif kind.startswith("two-level"):
        r = compare_paired(
            e.a.mean(axis=1), e.b.mean(axis=1), seed=seed, clusters=e.clusters, samples=e.samples, resamples=resamples
        )
    elif kind == "prediction-powered Δ":
        f = e.diffs
        y = e.human_b - e.human_a
        n = d.labelled
        est = ppi_mean(f[n:], f[:n], y[:n])  # items are in random order: the first n are a random subset
        return est.ci_low, est.ci_high
    else:
        raise ValueError(kind)
    return r.ci_low, r.ci_high


def coverage(kind: str, runs: int, resamples: int = 2_000, seed: int = 0, design: Design | None = None) -> int:
    """How many of ``runs`` simulated evals have a 95 % interval (of ``kind``) covering the true Δ."""
    d = design or KINDS[kind]
    truth = true_delta(d, human=kind == "prediction-powered Δ")
    rng = np.random.default_rng(seed)
    covered = 0
    for run in range(runs):
        low, high = interval(kind, simulate(rng, d), d, resamples, seed=run)
        covered += low <= truth <= high
    return covered


# ------------------------------------------------------------------ family-wise errors and the gate
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


def _summary(version: str, run_id: str) -> RunSummary:
    return RunSummary(run_id, version, "g", "judge", "0.5", False, run_id, {m.ITEMS: 48.0})


def gate_promotions(runs: int, require_interval: bool, seed: int = 0, resamples: int = 2_000) -> int:
    """Of ``runs`` challengers with no true gain in correctness or groundedness, how many the rule
    promotes: the spec's mean rule (about a quarter: both null means must move the right way), or with
    the opt-in interval gate."""
    d = replace(KINDS["clustered bootstrap"], delta=0.0)
    rng = np.random.default_rng(seed)
    rule = Rule(require_interval=require_interval)
    champion = Champion("1", "v1", _summary("v1", "champion-run"))
    promoted = 0
    for run in range(runs):
        paired = {}
        for metric in ("correctness", "groundedness"):
            e = simulate(rng, d)
            paired[metric] = compare_paired(
                e.a.mean(axis=1), e.b.mean(axis=1), seed=run, clusters=e.clusters, resamples=resamples
            )
        promoted += decide(_summary("v2", "challenger-run"), champion, rule, paired).promoted
    return promoted
