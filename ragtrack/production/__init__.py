"""The production loop: what a deployed app answered, read back, scored and turned into golden items.

The golden set is a cold start; the evidence that matters grows from production.
This layer reads an app's conversations through the platform's public API (or a
JSONL export, or MLflow traces), keeps each answered question as a
:class:`~ragtrack.production.messages.ProductionMessage`, and feeds triage, the
golden-set SOP and the daily monitor. Only :mod:`ragtrack.tracking` writes them
to MLflow (one trace per message in the ``production`` experiment).
"""
