"""``ragtrack golden``: build the golden set (propose, accept, answer, audit) and keep it honest."""

from __future__ import annotations

import sys

import click
from rich.markup import escape

from ragtrack.cli import LLM_HELP, console, err, main, show, warn
from ragtrack.cli.corpus import CORPUS_HELP
from ragtrack.heartbeat import heartbeat

GOLDEN_HELP = "Golden set JSONL (default: from ragtrack.toml or golden/golden.jsonl)."


def golden_options(f):
    """--golden and --corpus, as every golden command takes them."""
    f = click.option("--corpus", "corpus_path", type=click.Path(), help=CORPUS_HELP)(f)
    return click.option("--golden", "golden_path", type=click.Path(dir_okay=False), help=GOLDEN_HELP)(f)


def llm_options(f):
    """--llm, --language, --no-cache: the options of every LLM-backed golden command."""
    f = click.option("--no-cache", is_flag=True, help="Ignore the LLM response cache.")(f)
    f = click.option("--language", type=click.Choice(["en", "zh"]), help="Prompt language (default: the material's).")(
        f
    )
    return click.option("--llm", default="offline", show_default=True, help="LLM: " + LLM_HELP)(f)


def _accounting(accounting: dict) -> None:
    from ragtrack import report as view

    show(view.accounting_table({"golden": accounting}))


@main.group()
def golden() -> None:
    """Golden set tools: build it (propose, accept, answer, audit), check it, keep it hard.

    \b
    The SOP, from a folder of documents:
      ragtrack corpus ls / search "…"                 # find passages and their IDs
      ragtrack golden propose --doc a.md --doc b.md   # candidate questions → candidates.jsonl
      (review: fix questions and gt_context_ids, set "status": "accepted")
      ragtrack golden accept                          # accepted candidates → golden set
      ragtrack golden answer                          # GT answers fused from the GT passages
      ragtrack golden audit                           # check answers and GT sets; exit 1 on findings
      ragtrack golden validate                        # also reports stale GT after corpus edits
      ragtrack golden power v1 v5 --delta 0.2         # what the set can detect, and the items Δ 0.2 needs
    """


@golden.command("validate")
@golden_options
@click.pass_context
def golden_validate(ctx, golden_path, corpus_path):
    """Check the golden set against the corpus; every problem names file, line and field.

    Also reports items whose GT passages changed or disappeared since they were
    written (stale GT) and items without a GT answer yet; either makes the exit
    status 1, as they would make `ragtrack eval` refuse.
    """
    from ragtrack.api import check_golden
    from ragtrack.errors import warning_summary
    from ragtrack.golden import stale_advice

    check = check_golden(root=ctx.obj["root"], corpus_path=corpus_path, golden_path=golden_path)
    corpus, gold = check.corpus, check.golden
    verdict = "[green]ok[/]" if check.ready else "[bold red]not ready[/]"  # eval would refuse it
    console.print(
        f"{verdict} {len(gold)} items, {len(corpus)} passages in {len(corpus.documents)} documents; "
        f"digest {gold.digest}"
    )
    for line in warning_summary(corpus.warnings):
        warn(line, "corpus warning")
    for s in check.stale:
        warn(s, "stale GT")
    if check.stale:
        err.print(
            f"{len(check.stale)} item(s) have stale GT, which eval refuses: {stale_advice(check.stale)}",
            highlight=False,
            markup=False,
        )
    if check.unanswered:
        err.print(
            f"{len(check.unanswered)} item(s) have no GT answer yet (run `ragtrack golden answer`):",
            highlight=False,
        )
        for item_id in check.unanswered:  # at their lines, as every input problem is
            err.print(f"  {check.golden.where(item_id)}: {item_id}: gt_answer is empty", highlight=False, markup=False)
    for line in check.shapes:
        warn(line)
    if check.unfingerprinted:
        console.print(
            f"[dim]{len(check.unfingerprinted)} item(s) carry no GT fingerprint, so edits to their passages "
            "go unnoticed: run `ragtrack golden fingerprint`[/]"
        )
    sys.exit(0 if check.ready else 1)


@golden.command("stats")
@golden_options
@click.pass_context
def golden_stats_cmd(ctx, golden_path, corpus_path):
    """Items per type, GT sizes, documents covered."""
    from ragtrack import report as view
    from ragtrack.api import golden_stats

    console.print(
        view.stats_table(golden_stats(root=ctx.obj["root"], corpus_path=corpus_path, golden_path=golden_path))
    )


def _from_logs_options(f):
    """The options of ``propose --from-logs``: which pulled messages, judged how, proposed how many."""
    from ragtrack.cli.triage import judge_options, message_filters, triage_options

    f = click.option("--limit", type=click.IntRange(min=1), help="--from-logs: at most this many candidates.")(f)
    f = click.option(
        "--min-users",
        type=click.IntRange(min=0),
        default=2,
        show_default=True,
        help="--from-logs: propose a cluster disliked by at least this many distinct users (0: every bad case).",
    )(f)
    return message_filters(judge_options(0.25, no_cache=False)(triage_options(f)))


@golden.command("power")
@click.argument("version_a")
@click.argument("version_b")
@click.option("--delta", type=float, help="A difference you care about: how many items would detect it at 80% power.")
@click.option("--cluster", help="What is resampled as one unit: document (default), item, type, tag.")
@click.option("--tracking-uri", help="MLflow tracking URI.")
@click.pass_context
def golden_power(ctx, version_a, version_b, delta, cluster, tracking_uri):
    """Can this golden set see the difference you care about? The minimum detectable Δ at 80%
    power (two-sided α 0.05) of each primary metric (the promotion rule's), from the paired,
    clustered variance of VERSION_A's and VERSION_B's latest comparable evals; with --delta,
    the items a difference of that size needs. Logs nothing.

    \b
    Examples:
      ragtrack golden power v1 v5                # before evaluating v6: what can 48 items detect?
      ragtrack golden power v1 v5 --delta 0.2    # how many items would a gain of 0.2 need?
    """
    from ragtrack import report as view
    from ragtrack.api import compare

    report = compare(
        version_a,
        version_b,
        root=ctx.obj["root"],
        tracking_uri=tracking_uri,
        log=False,
        cluster=cluster,
        delta=delta,
    )
    for line in view.power_lines(report.power, report.clusters):
        console.print(line, highlight=False)


@golden.command("propose")
@click.option(
    "--doc",
    "documents",
    multiple=True,
    help="A document (its path in the corpus) or a folder of them; repeat it: types C and D need two or more.",
)
@click.option(
    "--from-logs",
    is_flag=True,
    help="Propose from production instead: one candidate per bad-case cluster of `ragtrack logs triage` "
    "that no golden item covers, with suggested GT passages and the production answer users disliked.",
)
@_from_logs_options
@click.option("--types", help="Question types, comma-separated (default: A,B,C,D; C and D with two or more documents).")
@click.option("--n", "n", default=2, show_default=True, type=click.IntRange(min=1), help="Candidates per type.")
@click.option(
    "--out", type=click.Path(dir_okay=False), help="Candidates file (default: candidates.jsonl beside the golden set)."
)
@llm_options
@golden_options
@click.pass_context
def golden_propose(ctx, documents, from_logs, types, n, out, llm, language, no_cache, golden_path, corpus_path, **logs):
    """Propose candidate questions of each type from documents, each with its suggested GT passages,
    a solution path and a draft answer. They go to a candidates file for review, never straight
    into the golden set. Offline, a template proposer (headings and key sentences) stands in.

    \b
    With --from-logs, from production instead: each cluster of near-duplicate questions that users
    disliked (see `ragtrack logs triage`) and no golden item covers becomes one candidate with the
    question as users asked it, GT passages suggested by corpus search and by the app's own
    contexts (each marked which, in suggested_from), a suggested type, and its provenance: the
    message IDs, users, dates, the production answer and the users' complaints.

    \b
    Examples:
      ragtrack golden propose --doc models/flux-dev-setup.md --doc models/vram-requirements.md
      ragtrack golden propose --from-logs                  # clusters disliked by 2+ users
      ragtrack golden propose --from-logs --since 2025-06-04 --min-users 3
    """
    from ragtrack.api import propose

    if from_logs:
        if documents or types:
            raise click.UsageError("--from-logs proposes from production: leave out --doc and --types")
        _propose_from_logs(ctx, out, no_cache, golden_path, corpus_path, **logs)
        return
    if not documents:
        raise click.UsageError("name the documents to propose from (--doc, repeatable), or pass --from-logs")

    wanted = [t.strip().upper() for t in (types or "").split(",") if t.strip()]
    bad = [t for t in wanted if t not in ("A", "B", "C", "D")]
    if bad:
        raise click.BadParameter(f"unknown type(s) {', '.join(bad)}; expected A, B, C, D", param_hint="--types")

    def say(line: str) -> None:
        err.print(f"[dim]{escape(line)}[/]", highlight=False)

    say(f"proposing from {len(documents)} document(s) with {llm} (reading the corpus, then each type in turn)")
    with heartbeat(say, "proposing questions"):  # an LLM's replies, or jieba's first load, take a while
        where = _files(ctx, out, no_cache, golden_path, corpus_path)
        report = propose(list(documents), types=wanted or None, n=n, llm=llm, language=language, **where)
    for c in report.added:
        console.print(f"[bold]{escape(str(c.id))}[/] ({c.type}) {escape(str(c.question))}", highlight=False)
        console.print(f"    GT: {escape(', '.join(c.gt_context_ids))}", highlight=False, style="dim")
    for note in report.notes:
        err.print(f"note: {escape(str(note))}", highlight=False)
    for t, error in report.failed.items():
        err.print(f"[red]type {t} failed:[/] {escape(str(error))}", highlight=False)
    _accounting(report.accounting)
    if report.proposer == "offline-template":
        console.print(
            "[yellow]offline:[/] these are templates built from headings and key sentences, not an LLM's "
            "questions; rewrite each question as a user would ask it (or use --llm)."
        )
    console.print(
        f"{len(report.added)} candidate(s) added to {report.path}. Review them: fix question and "
        'gt_context_ids (`ragtrack corpus search`), set "status": "accepted", then `ragtrack golden accept`.'
    )
    sys.exit(1 if report.failed else 0)


def _files(ctx, out, no_cache, golden_path, corpus_path) -> dict:
    """What both kinds of propose read and write: the project, its files, the candidates file, the cache."""
    return {
        "out": out,
        "root": ctx.obj["root"],
        "golden_path": golden_path,
        "corpus_path": corpus_path,
        "use_cache": not no_cache,
    }


def _propose_from_logs(ctx, out, no_cache, golden_path, corpus_path, *, min_users, limit, **triage):
    from ragtrack.api import propose_from_logs
    from ragtrack.cli.triage import on_stderr

    where = _files(ctx, out, no_cache, golden_path, corpus_path)
    report = propose_from_logs(min_users=min_users, limit=limit, **where, **on_stderr(), **triage)
    for c in report.added:
        p = c.provenance
        console.print(f"[bold]{escape(str(c.id))}[/] ({c.type}) {escape(str(c.question))}", highlight=False)
        console.print(
            f"    {len(p.messages)} message(s), {p.users} user(s), {p.dislikes} dislike(s); "
            f"GT: {escape(', '.join(c.gt_context_ids))}",
            highlight=False,
            style="dim",
        )
        if c.history:
            console.print(
                f"    a follow-up: asked after {len(c.history)} earlier turn(s) of its conversation, written as "
                "its history (review them with the question)",
                highlight=False,
                style="dim",
            )
    if report.weak:
        from ragtrack.production.proposals import WEAK_MATCH

        shares = ", ".join(f"{cid} {share:.0%}" for cid, share in report.weak.items())
        warn(
            f"{len(report.weak)} candidate(s) whose suggested GT passages are weak matches for this corpus "
            f"(at most this share of the question's words in any of them, under {WEAK_MATCH:.0%}: {shares}): "
            "logs of another app or domain? Check them before accepting."
        )
    few = [q for q, why in report.skipped.items() if "--min-users" in why or "--limit" in why]
    for question, why in report.skipped.items():
        if question not in few:
            err.print(f"skipped: {escape(question)} ({escape(why)})", highlight=False)
    if few:
        err.print(f"skipped {len(few)} weaker bad case(s) (below --min-users or beyond --limit)", highlight=False)
    console.print(
        f"{len(report.added)} candidate(s) from production added to {report.path}. Review each: the GT "
        "passages in suggested_from (corpus search and the app's contexts), the question and the type; set "
        '"status": "accepted", then `ragtrack golden accept`, `golden answer`, `golden audit`.',
        highlight=False,
    )


@golden.command("accept")
@click.option("--id", "item_ids", multiple=True, help="Accept these candidates (default: those with status accepted).")
@click.option("--candidates", "candidates_path", type=click.Path(dir_okay=False), help="Candidates file.")
@golden_options
@click.pass_context
def golden_accept(ctx, item_ids, candidates_path, golden_path, corpus_path):
    """Move reviewed candidates into the golden set, after checking their fields, that every GT ID
    exists and that the GT fits the type. Nothing is moved if any candidate has a problem."""
    from ragtrack.api import accept_candidates

    done, path = accept_candidates(
        item_ids=list(item_ids) or None,
        candidates_path=candidates_path,
        root=ctx.obj["root"],
        corpus_path=corpus_path,
        golden_path=golden_path,
    )
    if done.moved:
        console.print(f"moved {len(done.moved)} item(s) into {path}: {', '.join(done.moved)}", highlight=False)
    if done.already:
        console.print(f"already in the golden set, removed from the candidates: {', '.join(done.already)}")
    console.print("next: `ragtrack golden answer` for the items without a GT answer")


@golden.command("answer")
@click.option("--id", "item_ids", multiple=True, help="Only these items.")
@click.option("--force", is_flag=True, help="Rewrite the answers of the chosen items even if they have one.")
@llm_options
@golden_options
@click.pass_context
def golden_answer(ctx, item_ids, force, llm, language, no_cache, golden_path, corpus_path):
    """Write the GT answer of items that have GT passages and no answer, fused from the GT passages
    (only facts they contain). Offline, answers are extracted sentences, not a fusion."""
    from ragtrack.api import answer_golden

    report = answer_golden(
        llm=llm,
        item_ids=list(item_ids) or None,
        force=force,
        language=language,
        root=ctx.obj["root"],
        corpus_path=corpus_path,
        golden_path=golden_path,
        use_cache=not no_cache,
    )
    for item_id, why in report.skipped.items():
        console.print(f"skipped {escape(str(item_id))}: {escape(str(why))}", highlight=False)
    for item_id, error in report.failed.items():
        err.print(f"[red]{escape(str(item_id))} failed:[/] {escape(str(error))}", highlight=False)
    _accounting(report.accounting)
    if report.offline and report.written:
        console.print(
            "[yellow]offline:[/] the answers are sentences extracted from the GT passages, not fused; "
            "rewrite them or use --llm."
        )
    console.print(f"wrote {len(report.written)} GT answer(s) to {report.golden_path}")
    sys.exit(1 if report.failed else 0)


@golden.command("audit")
@click.option("--id", "item_ids", multiple=True, help="Only these items.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False), help="Report file (.md or .json).")
@llm_options
@golden_options
@click.pass_context
def golden_audit(ctx, item_ids, report_path, llm, language, no_cache, golden_path, corpus_path):
    """Check every GT answer against its GT passages (each sentence supported) and every GT set for
    sufficiency and minimality; pass or needs change, with the sentence or passage at fault.
    Writes a report; exit status 1 when any item needs a change."""
    from ragtrack.api import audit_golden

    report = audit_golden(
        llm=llm,
        item_ids=list(item_ids) or None,
        report_path=report_path,
        language=language,
        root=ctx.obj["root"],
        corpus_path=corpus_path,
        golden_path=golden_path,
        use_cache=not no_cache,
    )
    for r in report.results:
        if r.passed:
            continue
        err.print(f"[red]{r.verdict}[/] {escape(str(r.item_id))}: {escape(r.reason or r.error or '')}", highlight=False)
        for s in r.unsupported:
            err.print(f"    unsupported: {escape(str(s))}", highlight=False)
        if r.missing:
            err.print(f"    missing: {escape(str(r.missing))}", highlight=False)
        for pid in r.superfluous:
            err.print(f"    superfluous GT passage: {escape(str(pid))}", highlight=False)
    _accounting(report.accounting)
    passed = sum(r.passed for r in report.results)
    console.print(
        f"{passed}/{len(report.results)} item(s) pass · auditor: {report.auditor} · report {report.report_path}",
        highlight=False,
    )
    sys.exit(0 if report.passed else 1)


@golden.command("fingerprint")
@click.option(
    "--id", "--item", "item_ids", multiple=True, help="Re-baseline these items (after checking their answers)."
)
@click.option("--all", "everything", is_flag=True, help="Every item.")
@golden_options
@click.pass_context
def golden_fingerprint(ctx, item_ids, everything, golden_path, corpus_path):
    """Record the current text of each item's GT passages (default: items without a fingerprint),
    so validate and eval can tell when a corpus edit or re-import changes them."""
    from ragtrack.api import fingerprint_golden

    ids = fingerprint_golden(
        item_ids=list(item_ids) or None,
        everything=everything,
        root=ctx.obj["root"],
        corpus_path=corpus_path,
        golden_path=golden_path,
    )
    console.print(f"fingerprinted {len(ids)} item(s)" + (f": {', '.join(ids)}" if ids else ""), highlight=False)


@golden.command("import")
@click.argument("folder", type=click.Path(exists=True, file_okay=False))
@click.option("--format", "fmt", type=click.Choice(["normalized"]), default="normalized", show_default=True)
@click.option(
    "--out", required=True, type=click.Path(file_okay=False), help="Folder for corpus.jsonl and golden.jsonl."
)
@click.option("--limit", type=click.IntRange(min=1), help="Only the first N questions (the corpus is kept whole).")
def golden_import(folder, fmt, out, limit):
    """Import a public benchmark: FOLDER holds corpus.jsonl and queries.jsonl (gt_ids, gt_groups).
    Multi-hop questions become type D, comparisons type C; GT groups are kept for all_hops_at_k."""
    from ragtrack.api import import_benchmark

    done = import_benchmark(folder, out=out, fmt=fmt, limit=limit)
    types = ", ".join(f"{t}: {n}" for t, n in done.by_type.items())
    console.print(
        f"{done.items} items ({types}; {done.with_groups} with GT groups) → {done.golden_path}\n"
        f"{done.passages} passages → {done.corpus_path}\n"
        f"evaluate: ragtrack eval --version v1 --corpus {done.corpus_path} --golden {done.golden_path}",
        highlight=False,
    )


@golden.command("retire")
@click.argument("versions", nargs=-1, required=True)
@click.option("--golden", "golden_path", type=click.Path(dir_okay=False), help=GOLDEN_HELP)
@click.option("--apply", is_flag=True, help="Move them to regression.jsonl beside the golden set (default: only list).")
@click.option("--tracking-uri", help="MLflow tracking URI.")
@click.pass_context
def golden_retire(ctx, versions, golden_path, apply, tracking_uri):
    """Items that every listed version (e.g. the last three) answered with full marks:
    correctness 5 and every GT passage retrieved. Keep the golden set hard; retired
    items go to a regression set. A changed golden set has a new digest."""
    from ragtrack.api import retire, retirement_candidates

    ids = retirement_candidates(
        list(versions), root=ctx.obj["root"], golden_path=golden_path, tracking_uri=tracking_uri
    )
    if not ids:
        console.print("no item has full marks in every listed version")
        return
    console.print(f"full marks in {', '.join(versions)}: {', '.join(ids)}")
    if apply:
        target = retire(ids, root=ctx.obj["root"], golden_path=golden_path)
        console.print(f"moved {len(ids)} item(s) to {target}")
    else:
        console.print("run again with --apply to move them to the regression set")
