"""The default thresholds of triage, apart from the code that applies them.

The command line shows them in ``--help`` (``ragtrack logs triage``, ``golden
propose --from-logs``): kept here, with nothing to import, they cost its
start-up nothing, where the modules that apply them load numpy, the judges and
the embedder's models.
"""

#: A message whose best context scored below this retrieved weakly (platform scores are 0–1 relevance).
LOW_RETRIEVAL_SCORE = 0.3
#: Questions this similar (cosine in the joint space, meaning and wording) are near-duplicates; chosen by
#: benchmarks/triage_benchmark.py (see ragtrack.production.similarity).
CLUSTER_SIMILARITY = 0.375
#: Questions this similar by wording alone (no embedder for the language) are near-duplicates.
WORDING_SIMILARITY = 0.35
#: A cluster whose questions are on average this similar to a golden item's question is covered by it.
COVERAGE_SIMILARITY = 0.6
