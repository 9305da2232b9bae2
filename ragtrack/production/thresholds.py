"""The default thresholds of triage, apart from the code that applies them.

The command line shows them in ``--help`` (``ragtrack logs triage``, ``golden
propose --from-logs``): kept here, with nothing to import, they cost its
start-up nothing, where the modules that apply them load numpy, the judges and
the embedder's models.
"""

#: A message whose best context scored below this retrieved weakly (platform scores are 0–1 relevance).
LOW_RETRIEVAL_SCORE = 0.3
#: Questions this similar (cosine in the joint space) are near-duplicates: on the shipped traffic every
#: problem is one cluster from 0.32 to 0.36 (Chinese) and 0.32 to 0.58 (English), and wording alone
#: separates the English ones from 0.30 to 0.45.
CLUSTER_SIMILARITY = 0.35
#: A cluster whose questions are on average this similar to a golden item's question is covered by it.
COVERAGE_SIMILARITY = 0.6
