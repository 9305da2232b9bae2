"""The pyfunc behind every logged agent version (MLflow "models from code": no pickling).

``mlflow.pyfunc.load_model("models:/rag-agent@champion").predict(["How do I …?"])``
builds the agent from the logged spec on first use — a ragtrack pipeline, or
the client of an external app — and answers with it. MLflow copies this file
into every model it logs, so it only hands over to :mod:`ragtrack.tracking.answering`.
"""

from __future__ import annotations

import mlflow


class RagAgentModel(mlflow.pyfunc.PythonModel):
    """pyfunc wrapper: the logged spec, and the model config (see ``answering.ModelSettings``)."""

    def load_context(self, context) -> None:
        from ragtrack.tracking.answering import ModelSettings, load_spec_file

        self._spec = load_spec_file(context.artifacts["spec"])
        self._settings = ModelSettings.of(context.model_config)

    def predict(self, context, model_input: list[str], params=None):
        """One ``{"answer", "retrieved_ids", "contexts", "context_ids", "version"}`` per question:
        ``retrieved_ids`` the canonical passages in rank order (each once), ``contexts`` the texts
        handed to the generator, ``context_ids`` each one's passages (empty: it maps to none) and
        ``version`` the agent version that answered.

        The type hint lets MLflow validate inputs and turn a one-column DataFrame
        (what ``mlflow.models.evaluate`` passes) into a list of questions.
        """
        from ragtrack.tracking.answering import answer_all

        return answer_all(self._spec, self._settings, [str(q) for q in model_input])


mlflow.models.set_model(RagAgentModel())
