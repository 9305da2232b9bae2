"""The pyfunc behind every logged agent version (MLflow "models from code": no pickling).

``mlflow.pyfunc.load_model("models:/rag-agent@champion").predict(["How do I …?"])``
builds the agent from the logged spec on first use — a ragtrack pipeline, or
the client of an external app — and answers with it.
"""

from __future__ import annotations

from pathlib import Path

import mlflow


class RagAgentModel(mlflow.pyfunc.PythonModel):
    """pyfunc wrapper: builds the agent from the logged spec on first use.

    ``model_config`` may set ``corpus`` (path; contexts are mapped to its
    passages) and ``root`` (the project, for its ``ragtrack.toml``).
    """

    def load_context(self, context) -> None:
        from ragtrack.spec import LoadedSpec

        self._spec = LoadedSpec.from_json(Path(context.artifacts["spec"]).read_text("utf-8"))
        self._config = dict(context.model_config or {})
        self._agent = None

    def _build(self):
        from ragtrack.agent import AgentContext, build_agent
        from ragtrack.config import load_config

        config = load_config(self._config.get("root", "."))
        corpus_path = self._config.get("corpus")  # relative: to the project (models logged before it was absolute)
        corpus = config.load_corpus(config.path(corpus_path) if corpus_path else None)
        return build_agent(self._spec, AgentContext(corpus, config, config.eval.min_overlap))

    def predict(self, context, model_input: list[str], params=None):
        """One ``{"answer", "retrieved_ids", "contexts", "context_ids"}`` per question: ``retrieved_ids``
        the canonical passages in rank order (each once), ``contexts`` the texts handed to the generator
        and ``context_ids`` each one's passages (empty: it maps to none).

        The type hint lets MLflow validate inputs and turn a one-column DataFrame
        (what ``mlflow.models.evaluate`` passes) into a list of questions.
        """
        if self._agent is None:
            self._agent = self._build()
        outputs = []
        for question in (str(q) for q in model_input):
            out = self._agent.answer(question)
            outputs.append(
                {
                    "answer": out.answer,
                    "retrieved_ids": out.passage_ids,
                    "contexts": [c.text for c in out.contexts],
                    "context_ids": [list(c.passage_ids) for c in out.contexts],
                }
            )
        return outputs


mlflow.models.set_model(RagAgentModel())
