"""The pyfunc behind every logged agent version (MLflow "models from code": no pickling).

``mlflow.pyfunc.load_model("models:/rag-agent@champion").predict(["How do I …?"])``
builds the agent from the logged spec on first use and answers with it.
"""

from __future__ import annotations

from pathlib import Path

import mlflow

from ragtrack.spec import LoadedSpec


class RagAgentModel(mlflow.pyfunc.PythonModel):
    """pyfunc wrapper: builds the agent from the logged spec on first use.

    ``model_config`` may set ``corpus`` (path) and ``cache_dir``; the LLM is the
    spec's (``offline`` unless the version was logged with another).
    """

    def load_context(self, context) -> None:
        self._spec = LoadedSpec.model_validate_json(Path(context.artifacts["spec"]).read_text("utf-8"))
        self._config = dict(context.model_config or {})
        self._agent = None

    def _build(self):
        from ragtrack.config import load_config
        from ragtrack.corpus import load_corpus
        from ragtrack.llm import make_llm
        from ragtrack.pipeline.agent import Agent

        config = load_config(self._config.get("root", "."))
        corpus = load_corpus(self._config.get("corpus") or config.path(config.project.corpus))
        llm = make_llm(self._spec.spec.llm.model, config)
        cache = Path(self._config.get("cache_dir") or config.cache_dir)
        return Agent(self._spec, corpus, llm, cache_dir=cache)

    def predict(self, context, model_input: list[str], params=None):
        """One ``{"answer", "retrieved_ids", "contexts"}`` per question.

        The type hint lets MLflow validate inputs and turn a one-column DataFrame
        (what ``mlflow.models.evaluate`` passes) into a list of questions.
        """
        if self._agent is None:
            self._agent = self._build()
        questions = [str(q) for q in model_input]
        outputs = []
        for q in questions:
            out = self._agent.answer(q)
            outputs.append(
                {
                    "answer": out.answer,
                    "retrieved_ids": out.retrieved_passage_ids,
                    "contexts": [c.text for c in out.contexts],
                }
            )
        return outputs


mlflow.models.set_model(RagAgentModel())
