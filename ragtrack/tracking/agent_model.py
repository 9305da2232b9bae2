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
        """Builds the agent now (corpus, index, models), not on the first question: a model server
        answers its first request at once instead of timing it out while the agent loads."""
        from ragtrack.tracking.answering import ModelSettings, built_agent, load_spec_file

        self._spec = load_spec_file(context.artifacts["spec"])
        self._settings = ModelSettings.of(context.model_config)
        built_agent(self._spec, self._settings)

    def predict(self, context, model_input: list[str], params=None):
        """One ``{"answer", "retrieved_ids", "contexts", "context_ids", "version"}`` per question:
        ``retrieved_ids`` the canonical passages in rank order (each once), ``contexts`` the texts
        handed to the generator, ``context_ids`` each one's passages (empty: it maps to none) and
        ``version`` the agent version that answered.

        The type hint lets MLflow validate inputs and turn a one-column DataFrame
        (what ``mlflow.models.evaluate`` passes) into a list of questions.
        """
        from ragtrack.tracking.answering import answer_all

        questions = [str(q) for q in model_input]
        if empty := [n for n, q in enumerate(questions, start=1) if not q.strip()]:
            # MLflow's model server answers this exception with 400: an empty question is the caller's error.
            raise mlflow.exceptions.MlflowException.invalid_parameter_value(
                f"question {', '.join(map(str, empty))} of {len(questions)} is empty: send the questions to answer"
            )
        return answer_all(self._spec, self._settings, questions)


mlflow.models.set_model(RagAgentModel())
