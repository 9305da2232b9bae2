"""The Spark engine: the version's registered pyfunc answers on Spark executors, judges run there too.

The questions still to do go to Spark as DataFrames of up to :data:`MAX_TASK_ITEMS`
questions, one task each. In a task, ``mlflow.pyfunc.spark_udf`` (``env_manager="local"``:
the executors' Python is this one's) answers with the registered model in its ``record``
form — the whole agent output, stages and usage included — and a pandas UDF judges the
answers through ragtrack's LLM layer (:mod:`ragtrack.engines.spark_judging`). Back on the
driver, each row becomes an item record through the same
:func:`~ragtrack.evaluation.scoring.item_record` the local engine uses, and is checkpointed
as it arrives; aggregation, traces, metrics and the description follow as for any run.

One task per DataFrame, submitted from a pool of driver threads, is what lets records
stream back (a finished task is checkpointed while others run), lets a failing endpoint
stop the run within a task's worth of work, and bounds what is in flight at the judge
endpoint: with an endpoint limit ``L`` and ``S`` task slots, ``min(S, L)`` tasks run at
once, each judging under ``L // min(S, L)`` — never more than ``L`` in total.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import uuid
import warnings
from collections import deque
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from importlib import resources
from typing import Tuple  # noqa: UP035 - pandas_udf reads its type hints, and wants typing's

import pandas as pd

from ragtrack.agent import AgentOutput
from ragtrack.config import ProjectConfig
from ragtrack.engines import Work
from ragtrack.engines.spark_judging import JudgeSetup, judge_rows
from ragtrack.errors import RagtrackError
from ragtrack.evaluation.runner import EvalOutcome
from ragtrack.evaluation.scoring import item_record
from ragtrack.golden import GoldenItem
from ragtrack.llm.accounting import Usage
from ragtrack.llm.client import CircuitOpenError, EndpointRefusedError
from ragtrack.records import JudgeRecord
from ragtrack.secrets import secret_values
from ragtrack.tracking.answering import ModelSettings
from ragtrack.tracking.models import answer_udf

#: Questions per task: at least MIN (a task's set-up, a job's scheduling, are worth spreading), at
#: most MAX (what an interruption loses, how long the last task runs on alone). Between them, about
#: TASKS_PER_SLOT tasks per slot, so that slots finishing early take more.
MIN_TASK_ITEMS, MAX_TASK_ITEMS, TASKS_PER_SLOT = 8, 128, 4
#: Variables the executors' agent and judges read besides the keys (``secret_values``).
FORWARDED_ENV = ("OPENAI_BASE_URL", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
LOG4J = resources.files("ragtrack.engines").joinpath("log4j2.properties")

_session_lock = threading.Lock()
# PySpark warns at every pandas UDF that it does not test pandas 3 (MLflow's choice); ragtrack's
# UDFs exchange strings only, and the engine-equality tests check what comes back.
warnings.filterwarnings("ignore", message=".*does not yet fully support pandas", category=FutureWarning)


def spark_session(master: str, conf: dict[str, str] | None = None):
    """The process's SparkSession (made on first use, quiet: errors only, no console progress, no UI).

    Executors run this interpreter (``PYSPARK_PYTHON``, unless set): its ragtrack and models. A
    local master binds to the loopback interface. ``conf`` wins over these defaults.
    """
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise RagtrackError("--engine spark needs pyspark: pip install 'ragtrack[spark]' (and Java 17)") from None
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    quiet_java = f"-Dlog4j2.configurationFile={LOG4J}"
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": quiet_java,
        "spark.executor.extraJavaOptions": quiet_java,
        "spark.python.worker.reuse": "true",  # a worker keeps its agent (index, models) across tasks
        **(conf or {}),
    }
    with _session_lock:
        builder = SparkSession.builder.master(master).appName("ragtrack")
        for key, value in settings.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def executor_env() -> dict[str, str]:
    """The variables an executor's agent and judges need that this process has: the keys ragtrack
    knows of and :data:`FORWARDED_ENV` (a worker started before they were set would lack them)."""
    wanted = {**secret_values(), **{n: os.environ[n] for n in FORWARDED_ENV if n in os.environ}}
    return {name: value for name, value in wanted.items() if value}


def judge_udf(setup: JudgeSetup):
    """A pandas UDF (golden item JSON, answer record JSON) → verdict JSON, set up once per task."""
    from pyspark.sql.functions import pandas_udf

    @pandas_udf("string")
    def judge(batches: Iterator[Tuple[pd.Series, pd.Series]]) -> Iterator[pd.Series]:  # noqa: UP006
        for items, answers in batches:
            yield pd.Series(judge_rows(setup, items.tolist(), answers.tolist()))

    return judge


def endpoint_share(slots: int, limit: int | None) -> tuple[int, int | None]:
    """(tasks at once, judge requests each may have in flight) for ``slots`` task slots and a judge
    endpoint that serves ``limit`` requests at once (None: no endpoint to share, every slot works)."""
    if not limit:
        return slots, None
    at_once = max(1, min(slots, limit))
    return at_once, limit // at_once


def task_items(todo: int, slots: int) -> int:
    """How many questions each task answers (see :data:`MAX_TASK_ITEMS`)."""
    return max(MIN_TASK_ITEMS, min(MAX_TASK_ITEMS, math.ceil(todo / (slots * TASKS_PER_SLOT))))


class SparkEngine:
    name = "spark"

    def __init__(self, master: str, conf: dict[str, str]):
        self.master, self.conf = master, conf

    @property
    def label(self) -> str:
        return f"spark:{self.master}"

    @classmethod
    def create(cls, config: ProjectConfig, master: str | None) -> SparkEngine:
        return cls(master or config.spark.master, dict(config.spark.conf))

    def run(self, work: Work) -> EvalOutcome:
        sink, source, panel = work.sink, work.source, work.panel
        todo = sink.todo()
        if not todo:
            return sink.outcome()
        work.on_stage(f"starting Spark ({self.master})")
        spark = spark_session(self.master, self.conf)
        at_once, ceiling = endpoint_share(spark.sparkContext.defaultParallelism, panel.llm.endpoint_limit)
        env = executor_env()
        settings = ModelSettings(source.corpus, source.root, source.use_cache, "record")
        answer = answer_udf(spark, source.model_uri, settings, env)
        setup = JudgeSetup(
            source.root, source.judge, panel.language, source.use_cache, panel.samples, ceiling, panel.identity, env
        )
        judge = judge_udf(setup)
        size = task_items(len(todo), at_once)
        chunks = deque(todo[i : i + size] for i in range(0, len(todo), size))
        share = f", {ceiling} judge requests each" if ceiling else ""
        work.on_stage(f"answering on Spark: {len(chunks)} tasks of up to {size} questions, {at_once} at once{share}")
        return _Run(work, spark, answer, judge, at_once).collect(chunks)


class _Run:
    """The driver's side of one Spark eval: tasks submitted, rows turned into records as they come."""

    def __init__(self, work: Work, spark, answer, judge, at_once: int):
        self.work, self.spark, self.answer, self.judge, self.at_once = work, spark, answer, judge, at_once
        self.group = f"ragtrack-{uuid.uuid4().hex[:12]}"
        self.stopped: CircuitOpenError | None = None
        self.peaks: dict[str, int] = {}  # judge worker → the most requests it had in flight

    def collect(self, chunks: deque[list[GoldenItem]]) -> EvalOutcome:
        running: dict[Future, list[GoldenItem]] = {}
        pool = ThreadPoolExecutor(self.at_once, thread_name_prefix="spark-task")
        clean = False
        try:
            while (chunks and self.stopped is None) or running:
                while chunks and self.stopped is None and len(running) < self.at_once:
                    chunk = chunks.popleft()
                    running[pool.submit(self._task, chunk)] = chunk
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    chunk = running.pop(future)
                    for item, row in zip(chunk, _rows(future), strict=True):
                        self._finish(item, row)
                if self.stopped:  # the endpoint keeps failing: keep what finished, drop what is in flight
                    break
            clean = self.stopped is None
        finally:
            if not clean:
                self.spark.sparkContext.cancelJobGroup(self.group)
            pool.shutdown(wait=clean, cancel_futures=True)
        peak = sum(sorted(self.peaks.values())[-self.at_once :])  # the busiest workers, all at once: a bound
        return self.work.sink.outcome(self.stopped, peak_in_flight=peak)

    def _task(self, chunk: list[GoldenItem]) -> list:
        """One task: answer and judge ``chunk`` on an executor; its rows in chunk order."""
        sc = self.spark.sparkContext
        sc.setJobGroup(self.group, f"ragtrack eval {self.work.agent.identity.name}", interruptOnCancel=True)
        rows = [(i.id, i.question, i.model_dump_json()) for i in chunk]
        frame = self.spark.createDataFrame(sc.parallelize(rows, 1), "id string, question string, item string")
        answered = frame.withColumn("answer", self.answer("question"))
        judged = answered.select("id", "answer", self.judge("item", "answer").alias("verdict"))
        by_id = {row.id: row for row in judged.collect()}
        return [by_id[i.id] for i in chunk]

    def _finish(self, item: GoldenItem, row) -> None:
        answered, judged = json.loads(row.answer), json.loads(row.verdict)
        if "failed" in judged:
            raise RagtrackError(f"a Spark executor could not judge: {judged['failed']}")
        if stop := answered if "stopped" in answered else judged if "stopped" in judged else None:
            error = EndpointRefusedError if stop["refused"] else CircuitOpenError
            self.stopped = self.stopped or error(stop["stopped"])
            return
        source = self.work.source
        if answered["corpus_digest"] != source.corpus_digest:
            raise RagtrackError(
                f"the corpus a Spark executor reads at {source.corpus} is not the one this eval loaded "
                f"(digest {answered['corpus_digest']}, not {source.corpus_digest}): give the executors the same files"
            )
        output = AgentOutput.from_json(answered["output"])
        verdicts = {name: JudgeRecord(**v) for name, v in judged["verdicts"].items()}
        usage = {step: Usage.from_json(u) for step, u in judged["usage"].items()}
        if judged["verdicts"] or judged["usage"]:
            self.peaks[judged["worker"]] = max(self.peaks.get(judged["worker"], 0), judged["peak"])
        k = self.work.agent.top_k or len(output.contexts)
        latency = answered["seconds"] + judged["seconds"]
        self.work.sink.finish(item_record(item, output, verdicts, usage, k, latency))


def _rows(future: Future) -> list:
    """A finished task's rows; a task that failed is the run's error, in one line (Spark's is pages long)."""
    try:
        return future.result()
    except Exception as e:
        raise RagtrackError(f"a Spark task failed: {_python_error(str(e))}") from e


def _python_error(message: str) -> str:
    """The last line of the Python traceback inside a Java error, else the error's first line."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    python = [line for line in lines if not line.startswith(("at ", "File ", "^", "~")) and ": " in line]
    for line in reversed(python):
        if not line.startswith(("org.apache", "java.", "py4j", "Caused by")):
            return line
    return lines[0] if lines else message
