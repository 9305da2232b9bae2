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

``ragtrack monitor --engine spark`` judges production messages the same way: chunks of
them as tasks, the reference-free judges in a pandas UDF
(:func:`~ragtrack.engines.spark_judging.judge_message_rows`), each chunk's verdicts
written to the traces on the driver as it arrives.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sys
import threading
import uuid
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from importlib import resources
from typing import Tuple  # noqa: UP035 - pandas_udf reads its type hints, and wants typing's

import pandas as pd

from ragtrack.agent import AgentOutput
from ragtrack.config import ProjectConfig
from ragtrack.engines import MessageWork, Work
from ragtrack.engines.spark_judging import JudgeSetup, judge_message_rows, judge_rows
from ragtrack.errors import RagtrackError
from ragtrack.evaluation.runner import EvalOutcome
from ragtrack.evaluation.scoring import item_record
from ragtrack.golden import GoldenItem
from ragtrack.llm.accounting import Usage
from ragtrack.llm.client import CircuitOpenError, EndpointRefusedError
from ragtrack.production.judging import CHUNK, Judging, failures
from ragtrack.production.messages import ProductionMessage
from ragtrack.records import JudgeRecord
from ragtrack.secrets import secret_values
from ragtrack.tracking.answering import ModelSettings, follow_up
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


#: How long a standalone master (``spark://``) has to accept a connection: Spark's own driver retries
#: for minutes (206 s in the fault campaign) before its Java traceback.
MASTER_TIMEOUT_S = 5.0


def master_addresses(master: str) -> list[tuple[str, int]]:
    """The (host, port) of a standalone master URL, ``spark://h:7077`` or ``spark://h1:7077,h2:7077``
    (high availability); [] for any other master (``local[*]``, ``yarn``, ``k8s://…``): not probed."""
    if not master.startswith("spark://"):
        return []
    out = []
    for part in master[len("spark://") :].split(","):
        host, _, port = part.strip().rpartition(":")
        if not host or not port.isdigit():
            raise RagtrackError(f"--master {master}: expected spark://HOST:PORT (7077 by default), got {part!r}")
        out.append((host.strip("[]"), int(port)))
    return out


def reach_master(master: str, timeout_s: float = MASTER_TIMEOUT_S) -> None:
    """Refuses a standalone master no address of which accepts a connection within ``timeout_s``: one
    line naming it, before any Spark starts (its driver would retry for minutes, then print Java)."""
    addresses = master_addresses(master)
    problems = []
    for host, port in addresses:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return
        except OSError as e:
            problems.append(f"{host}:{port}: {e.strerror or 'no answer within ' + f'{timeout_s:g} s'}")
    if addresses:
        raise RagtrackError(
            f"Spark master {master} cannot be reached ({'; '.join(problems)}): is the cluster up? "
            "(--master, or [spark] master of ragtrack.toml)"
        )


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


def message_judge_udf(setup: JudgeSetup):
    """A pandas UDF production message JSON → verdicts JSON: a task's messages judged as one chunk."""
    from pyspark.sql.functions import pandas_udf

    @pandas_udf("string")
    def judge(messages: pd.Series) -> pd.Series:
        return pd.Series(judge_message_rows(setup, messages.tolist()))

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
        master = master or config.spark.master
        reach_master(master)
        return cls(master, dict(config.spark.conf))

    def _start(self, on_stage: Callable[[str], None], panel) -> tuple:
        """The session, how many tasks at once and each one's share of the judge endpoint, the executors' env."""
        on_stage(f"starting Spark ({self.master})")
        spark = spark_session(self.master, self.conf)
        at_once, ceiling = endpoint_share(spark.sparkContext.defaultParallelism, panel.llm.endpoint_limit)
        return spark, at_once, ceiling, executor_env()

    def run(self, work: Work) -> EvalOutcome:
        sink, source, panel = work.sink, work.source, work.panel
        todo = sink.todo()
        if not todo:
            return sink.outcome()
        spark, at_once, ceiling, env = self._start(work.on_stage, panel)
        settings = ModelSettings(source.corpus, source.judges.root, source.judges.use_cache, "record")
        answer = answer_udf(spark, source.model_uri, settings, env)
        judge = judge_udf(JudgeSetup.of(source.judges, panel, ceiling, env))
        size = task_items(len(todo), at_once)
        chunks = [todo[i : i + size] for i in range(0, len(todo), size)]
        share = f", {ceiling} judge requests each" if ceiling else ""
        work.on_stage(f"answering on Spark: {len(chunks)} tasks of up to {size} questions, {at_once} at once{share}")
        items = _Items(work)
        jobs = _Jobs(spark, at_once, f"ragtrack eval {work.agent.identity.name}")

        def task(chunk: list[GoldenItem]) -> list:
            rows = [(i.id, follow_up(i.question, i.history), i.model_dump_json()) for i in chunk]
            frame = jobs.frame(rows, "id string, question string, item string")
            answered = frame.withColumn("answer", answer("question"))
            return answered.select("id", "answer", judge("item", "answer").alias("verdict")).collect()

        jobs.run(chunks, task, items.finish)
        return sink.outcome(items.stopped, peak_in_flight=_peak(items.peaks, at_once))

    def judge_messages(self, work: MessageWork) -> Judging:
        panel = work.panel
        judging = Judging(panel.label, panel.identity, work.cost, {})
        if work.messages:
            spark, at_once, ceiling, env = self._start(work.progress, panel)
            judge = message_judge_udf(JudgeSetup.of(work.source, panel, ceiling, env))
            size = min(CHUNK, task_items(len(work.messages), at_once))  # a chunk is also what is written at once
            chunks = [work.messages[i : i + size] for i in range(0, len(work.messages), size)]
            work.progress(f"judging on Spark: {len(chunks)} tasks of up to {size} messages, {at_once} at once")
            jobs = _Jobs(spark, at_once, "ragtrack monitor")
            peaks: dict[str, int] = {}

            def task(chunk: list[ProductionMessage]) -> list:
                rows = [(m.message_id, json.dumps(m.to_json(), ensure_ascii=False)) for m in chunk]
                return (
                    jobs.frame(rows, "id string, message string")
                    .select("id", judge("message").alias("verdict"))
                    .collect()
                )

            def finish(chunk: list[ProductionMessage], rows: list) -> bool:
                by_id = {row.id: json.loads(row.verdict) for row in rows}
                replies = [by_id[m.message_id] for m in chunk]
                if "failed" in replies[0]:
                    raise RagtrackError(f"a Spark executor could not judge: {replies[0]['failed']}")
                if "stopped" in replies[0]:
                    judging.stopped = replies[0]["stopped"]
                    return False
                panel.llm.accounting.add_all({step: Usage.from_json(u) for step, u in replies[0]["usage"].items()})
                peaks[replies[0]["worker"]] = max(peaks.get(replies[0]["worker"], 0), replies[0]["peak"])
                verdicts = {
                    m.message_id: {name: JudgeRecord(**v) for name, v in reply["verdicts"].items()}
                    for m, reply in zip(chunk, replies, strict=True)
                }
                judging.failed += failures(verdicts)
                judging.verdicts.update(verdicts)
                work.on_chunk(chunk, verdicts)
                work.progress(f"judged {len(judging.verdicts)}/{len(work.messages)} messages")
                return True

            jobs.run(chunks, task, finish)
        judging.accounting = panel.llm.accounting.summary()
        return judging


def _peak(peaks: dict[str, int], at_once: int) -> int:
    """The most requests in flight at once, bounded: the busiest workers' peaks, all at once."""
    return sum(sorted(peaks.values())[-at_once:])


class _Jobs:
    """Chunks of work as Spark jobs, one task each, ``at_once`` at a time from a pool of driver threads.

    Each finished chunk's rows are handed to ``finish`` on the calling thread as it comes (so it is
    checkpointed, or written, while others run); ``finish`` returning False stops the run: what is in
    flight is cancelled, what finished is kept."""

    def __init__(self, spark, at_once: int, description: str):
        self.spark, self.at_once, self.description = spark, at_once, description
        self.group = f"ragtrack-{uuid.uuid4().hex[:12]}"

    def frame(self, rows: list[tuple], schema: str):
        """``rows`` as a one-partition DataFrame (one task), in this job group."""
        sc = self.spark.sparkContext
        sc.setJobGroup(self.group, self.description, interruptOnCancel=True)
        return self.spark.createDataFrame(sc.parallelize(rows, 1), schema)

    def run(self, chunks: list[list], task: Callable[[list], list], finish: Callable[[list, list], bool]) -> None:
        waiting = deque(chunks)
        running: dict[Future, list] = {}
        pool = ThreadPoolExecutor(self.at_once, thread_name_prefix="spark-task")
        go_on = clean = True
        try:
            while (waiting and go_on) or running:
                while waiting and go_on and len(running) < self.at_once:
                    chunk = waiting.popleft()
                    running[pool.submit(task, chunk)] = chunk
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    chunk = running.pop(future)
                    go_on = finish(chunk, _rows(future)) and go_on
                if not go_on:  # the endpoint keeps failing: keep what finished, drop what is in flight
                    break
            clean = go_on
        finally:
            if not clean:
                self.spark.sparkContext.cancelJobGroup(self.group)
            pool.shutdown(wait=clean, cancel_futures=True)


class _Items:
    """The driver's side of a Spark eval: each answered and judged row made an item record."""

    def __init__(self, work: Work):
        self.work = work
        self.stopped: CircuitOpenError | None = None
        self.peaks: dict[str, int] = {}  # judge worker → the most requests it had in flight

    def finish(self, chunk: list[GoldenItem], rows: list) -> bool:
        by_id = {row.id: row for row in rows}
        for item in chunk:
            self._finish(item, by_id[item.id])
        return self.stopped is None

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
