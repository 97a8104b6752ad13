"""The ``lightmem`` command: ingest conversations, search, inspect and erase a store."""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from lightmem.build import ENCODER_CHOICES
from lightmem.errors import LightMemError, StoreFullError
from lightmem.stores.views.cache import DEFAULT_CACHE_MB, ceiling_bytes
from lightmem.validation import MAX_TURN_CHARS

console = Console(stderr=True)
ENCODER_HELP = ("embedder of a new store; an existing one reopens with its own (default tuned: all-mpnet-base-v2 with "
                "the trained memory adapter; mpnet, minilm: the base models; hashing: no model)")
STORE_HELP = "store folder (created if missing) or postgresql://user:password@host/db (pip install 'lightmem-slm[postgres]')"
EXIT_ERROR, EXIT_STORE_FULL = 2, 3
EXIT_STATUS = (
    "Exit status: 0 done; 1 nothing done (a question answered no); 2 an error: bad input, or a store that cannot be "
    "used (the message says why: missing, read-only, corrupt, not a lightmem database); 3 a full disk (the "
    "store's, or a backup's): nothing of the write that hit it was stored, what was stored before is intact; "
    "free space and run the command again."
)


def _open(store: str, encoder: str | None = None, must_exist: bool = False, selector: str = "none", ltm=None):
    """Open a store with the embedder that wrote it (a new one: ``encoder``, by default the trained
    one); only ``search`` needs a Stage-2 model (``selector="trained"``)."""
    from lightmem.build import resolve_embedder
    from lightmem.memory import Memory
    from lightmem.retrieval.stage2 import Stage1Selector, default_selector
    from lightmem.stores.factory import describe, stored_embedder

    if must_exist and stored_embedder(store) is None:  # a file that is there but unusable raised, saying why
        raise LightMemError(f"no lightmem store at {describe(store)} yet; create one with "
                            f"`lightmem ingest FILE --store {describe(store)}`")
    embedder = resolve_embedder(store, encoder)
    return Memory.open(store, embedder=embedder, selector=default_selector() if selector == "trained" else Stage1Selector(),
                       ltm=ltm)


def _cache_mb(text: str) -> float:
    """``--cache-mb``: a number of MiB, 0 for no ceiling."""
    try:
        value = float(text)
        ceiling_bytes(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of MiB (0: no ceiling), got {text!r}") from None
    return value


def _shown(store: str) -> str:
    """The store's location as printed (a postgresql:// URI without its password)."""
    from lightmem.stores.factory import describe

    return describe(store)


def _ltm_options(no_nlp: bool = False):
    """Foreground LTM (the CLI runs cycles itself), with spaCy unless ``no_nlp``."""
    from lightmem.ltm import LTMOptions
    from lightmem.models.registry import ModelRegistry

    return LTMOptions(background=False, nlp=None if no_nlp else ModelRegistry().spacy())


_USER_HINTS = {
    "ingest": ", or leave out --user to store each conversation under its own id",
    "consolidate": ", or leave out --user to consolidate every user",
}


def _check_user(args: argparse.Namespace) -> None:
    """Refuse an empty or blank user id before anything is read or written.

    Raises:
        LightMemError: ``--user`` (or delete-user's USER) is empty or only whitespace.
    """
    user = getattr(args, "user", None)
    if user is None or user.strip():
        return
    flag = "USER" if args.command == "delete-user" else "--user"
    hint = _USER_HINTS.get(args.command, " (`lightmem stats --store STORE` lists a store's users)")
    raise LightMemError(f"{flag} is empty or only whitespace ({user!r}): give a user id such as 'alice'{hint}")


def _report_skipped(file: str, skipped: list[str]) -> None:
    """Tell which lines ``--skip-bad-lines`` dropped, and why (at most ``MAX_LISTED`` of them)."""
    from lightmem.datasets.formats import describe_bad_rows

    console.print(escape(f"skipped {len(skipped)} bad line(s) of {file}:\n{describe_bad_rows(skipped)}"), soft_wrap=True)


def cmd_ingest(args: argparse.Namespace) -> int:
    from lightmem.datasets import load_conversations, select_conversations

    convs = load_conversations(args.file, args.format, skip_bad=args.skip_bad_lines)
    skipped = [line for c in convs for line in c.skipped]
    if args.conversations is not None:
        convs = select_conversations(convs, args.conversations)
    memory = _open(args.store, args.encoder)
    total = sum(len(c.turns) for c in convs)
    written = 0
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn())
    with memory, Progress(*columns, console=console, disable=args.quiet) as progress:
        task = progress.add_task("ingest", total=total)
        for conv in convs:
            user = args.user if args.user is not None else conv.conv_id
            progress.update(task, description=f"ingest → {user}")
            for session in conv.sessions:
                written += len(memory.add_turns(user, session.turns))
                progress.advance(task, len(session.turns))
        _follow_index(memory, progress)
    if skipped:
        _report_skipped(args.file, skipped)
    note = f"; {len(skipped)} bad line(s) skipped" if skipped else ""
    console.print(escape(f"{total} turns read, {written} items written to {_shown(args.store)} ({total - written} already stored){note}"))
    return 0


def _follow_index(memory, progress: Progress) -> None:
    """Show the background indexer embedding what was just stored (closing the store waits for it anyway)."""
    total = memory.index_status().get("backlog", 0)
    if not total:
        return
    task = progress.add_task("embedding", total=total)
    while not memory.flush_index(timeout=0.5):
        status = memory.index_status()
        if not status.get("running", False):
            break  # the thread is gone; close() reports nothing more, the next open resumes the work
        progress.update(task, completed=max(0, total - status["backlog"]))
    progress.update(task, completed=total)


def cmd_search(args: argparse.Namespace) -> int:
    memory = _open(args.store, must_exist=True, selector=args.selector)
    with memory:
        hits = memory.search(args.query, args.user, k=args.k, budget=args.budget)
    if args.json:
        print(json.dumps([h.to_dict() for h in hits], indent=2))
        return 0
    within = f" within {args.budget} tokens" if args.budget else ""
    table = Table(title=f"top {len(hits)}{within} for user {args.user!r}")
    for col in ("#", "score", "text", "provenance"):
        table.add_column(col)
    for i, h in enumerate(hits, 1):
        table.add_row(str(i), f"{h.score:.4f}", h.item.text, ",".join(h.item.provenance))
    Console().print(table)
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    memory = _open(args.store, must_exist=True)
    with memory:
        counts = memory.stats()
        meta = memory.store.info()
    if args.json:
        print(json.dumps({"store": _shown(args.store), **meta, "users": counts}, indent=2))
        return 0
    table = Table(title=f"{_shown(args.store)} (embedder {meta['embedder']}, dim {meta['dim']})")
    for col in ("user", "turns", "items", "archived", "waiting for vectors"):
        table.add_column(col)
    for user, c in counts.items():
        table.add_row(user, str(c["turns"]), str(c["items"]), str(c["archived"]), str(c.get("unembedded", 0)))
    Console().print(table)
    return 0


def cmd_consolidate(args: argparse.Namespace) -> int:
    memory = _open(args.store, must_exist=True, ltm=_ltm_options(args.no_nlp))
    with memory:
        if args.user is not None and args.user not in memory.store.users():
            raise LightMemError(f"user {args.user!r} has nothing in {_shown(args.store)}")
        users = [args.user] if args.user else memory.store.users()
        reports = []
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, disable=args.quiet) as progress:
            task = progress.add_task("consolidating", total=len(users))
            for u in users:
                reports += memory.consolidate(u)
                progress.advance(task)
        stats = memory.ltm_stats()
    if args.json:
        print(json.dumps({"cycles": [r.to_dict() for r in reports], "ltm": stats}, indent=2))
        return 0
    table = Table(title=f"consolidation of {_shown(args.store)}")
    for col in ("user", "cycle", "items", "units", "+nodes", "merged", "+edges", "dropped", "abstracts", "superseded", "s"):
        table.add_column(col, no_wrap=True)
    for r in reports:
        table.add_row(r.user_id, str(r.cycle), str(sum(r.selected.values())), str(r.units), str(r.graph.get("nodes_added", 0)),
                      str(r.graph.get("nodes_merged", 0)), str(r.graph.get("edges_added", 0)), str(r.graph.get("nodes_dropped", 0)),
                      str(r.mtm.get("abstracts", 0)), str(r.mtm.get("superseded", 0) + r.mtm.get("merged", 0)),
                      f"{r.seconds.get('total', 0):.2f}")
    Console(width=max(120, Console().width)).print(table)
    console.print(f"LTM: {stats['nodes']} nodes, {stats['edges']} edges ({stats['nodes_dropped']} nodes dropped), {stats['cycles']} cycles")
    return 0


def cmd_graph(args: argparse.Namespace) -> int:
    from lightmem.ltm.export import export_graph, plot_graph
    from lightmem.ltm.graph import KnowledgeGraph

    memory = _open(args.store, must_exist=True)
    with memory:
        graph = KnowledgeGraph(memory.store.graph, memory.embedder.encode, memory.embedder.dim)
        stats = graph.stats()
        if args.export:
            console.print(f"wrote {export_graph(graph, args.export, args.include_dropped)}")
        picture = args.plot or (str(Path(args.export).with_suffix(".png")) if args.export else None)
        if picture:
            console.print(f"wrote {plot_graph(graph, picture, args.max_nodes)}")
    print(json.dumps(stats) if args.json else
          f"LTM: {stats['nodes']} nodes, {stats['edges']} edges, {stats['nodes_dropped']} nodes dropped, {stats['cycles']} cycles")
    return 0


def cmd_delete_user(args: argparse.Namespace) -> int:
    memory = _open(args.store, must_exist=True)
    with memory:
        if args.user not in memory.store.users():
            raise LightMemError(f"user {args.user!r} has nothing in {_shown(args.store)}")
        if not args.yes and sys.stdin.isatty():
            if input(f"Erase all turns, items and history of {args.user!r}? [y/N] ").strip().lower() != "y":
                console.print("nothing deleted")
                return 1
        removed = memory.delete_user(args.user)
    console.print(f"deleted user {args.user!r}: " + ", ".join(f"{n} {t}" for t, n in removed.items()))
    return 0


def cmd_backup(args: argparse.Namespace) -> int:
    from lightmem.stores.backup import backup

    summary = backup(args.store, args.out, force=args.force)
    console.print(escape(f"backed up {_shown(args.store)} to {summary.path}: {summary}"))
    return 0


def cmd_restore(args: argparse.Namespace) -> int:
    from lightmem.stores.backup import restore

    done = restore(args.backup, args.store, force=args.force)
    for line in done.lines(_shown(args.store), args.backup):
        console.print(escape(line), soft_wrap=True)
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    from lightmem.stores.backup import compact

    for line in compact(args.store, wal=args.wal).lines():
        console.print(escape(line), soft_wrap=True)
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from lightmem.stores.backup import check

    summary = check(args.store)
    console.print(escape(f"{summary.path}: integrity ok; {summary}"))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from lightmem.server.serve import serve
    from lightmem.server.settings import ServeSettings

    serve(ServeSettings(store=args.store, keys=args.keys, host=args.host, port=args.port, workers=args.workers,
                        encoder=args.encoder, selector=args.selector, max_body_bytes=args.max_body_bytes,
                        metrics_port=args.metrics_port, otel=args.otel,
                        cache_mb=args.cache_mb, max_turn_chars=args.max_turn_chars, index_here=args.index_here),
          malloc_arenas=args.malloc_arenas)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    from lightmem.worker import run_worker

    options = {} if args.pool_size is None else {"pool_size": args.pool_size}
    ltm = _ltm_options(args.no_nlp) if args.consolidate else None
    report = run_worker(args.store, device=args.device, batch_size=args.batch_size, lease_s=args.lease, drain=args.drain,
                        report_every=args.report_every, metrics_port=args.metrics_port, metrics_host=args.metrics_host,
                        consolidate=args.consolidate, ltm=ltm, **options)
    console.print(f"embedded {report.embedded:,} memories ({report.stored:,} stored) in {report.seconds:.1f} s; "
                  f"{report.items_per_s:.1f}/s while busy; the queue holds {report.queue.get('backlog', '?')} "
                  f"({report.queue.get('failed', '?')} failed)")
    if args.consolidate:
        c = report.consolidation
        console.print(f"ran {report.cycles:,} consolidation cycles; {c.get('waiting', '?')} users wait for one "
                      f"({c.get('failed', '?')} failed)")
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    from lightmem.server.mcp_server import run_stdio

    run_stdio(args.store, args.user, args.encoder, args.selector)
    return 0


def cmd_data(args: argparse.Namespace) -> int:
    from lightmem.datasets.catalog import Catalog, data_dir
    from lightmem.datasets.fetch import fetch, fetch_full, status

    catalog, folder = Catalog.load(), data_dir()
    if args.action == "list":
        table = Table(title=f"datasets in {folder}")
        for col in ("name", "file", "shipped", "state"):
            table.add_column(col)
        for s in status(catalog, folder):
            table.add_row(s.name, str(s.path.relative_to(folder)), "committed" if s.committed else "fetched", s.state)
        Console(width=max(110, Console().width)).print(table)
        return 0
    done = fetch(catalog, folder, args.names, Path(args.source) if args.source else None, verify=not args.no_verify)
    if args.full:
        done += fetch_full(catalog, folder)
    for p in done:
        console.print(f"ok {p}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lightmem",
        description="Long-term memory for LLM agents: ingest conversations into a per-user store, search it, consolidate it into a knowledge graph.",
        epilog="Example: lightmem ingest locomo.json --store mem/ && lightmem search 'When did Caroline go to the support group?' "
               f"--user conv-26 --store mem/. {EXIT_STATUS}",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("ingest", help="add a conversation file (LoCoMo, LongMemEval or JSONL) to a store")
    s.add_argument("file", help="LoCoMo .json, LongMemEval .json/.json.gz, or JSONL of {speaker, text, timestamp}")
    s.add_argument("--store", required=True, help=STORE_HELP)
    s.add_argument("--user", help="user id for every conversation (default: each conversation's own id)")
    s.add_argument("--format", default="auto", choices=["auto", "locomo", "longmemeval", "jsonl"])
    s.add_argument("--conversations", help="subset: indices ('0-4', '1,3') or ids ('conv-26')")
    s.add_argument("--encoder", choices=ENCODER_CHOICES, help=ENCODER_HELP)
    s.add_argument("--skip-bad-lines", action="store_true",
                   help="JSONL / JSON list of turns: ingest the valid lines and list the skipped ones "
                        "(default: a file with any bad line writes nothing)")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_ingest)

    s = sub.add_parser("search", help="retrieve a user's memories for a query")
    s.add_argument("query")
    s.add_argument("--user", required=True)
    s.add_argument("--store", required=True, help=STORE_HELP)
    s.add_argument("-k", type=int, default=5, help="how many items (default 5)")
    s.add_argument("--budget", type=int, default=None,
                   help="prompt tokens of memory lines, dates included (the reader's tokenizer): return the best set that fits (Stage 2 fills it from 5K candidates) instead of K items")
    s.add_argument("--selector", choices=["trained", "none"], default="trained",
                   help="Stage 2: the learned ranker of checkpoints/ranker (default) or the Stage-1 order")
    s.add_argument("--json", action="store_true", help="print hits as JSON (text, provenance, scores)")
    s.set_defaults(func=cmd_search)

    s = sub.add_parser("stats", help="users, turns and items in a store")
    s.add_argument("--store", required=True, help=STORE_HELP)
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_stats)

    s = sub.add_parser("consolidate", help="run offline consolidation now: MTM -> de-identified LTM graph")
    s.add_argument("--store", required=True, help=STORE_HELP)
    s.add_argument("--user", help="only this user (default: every user of the store)")
    s.add_argument("--no-nlp", action="store_true", help="rules only: no spaCy parser / NER (faster, coarser graph)")
    s.add_argument("--json", action="store_true", help="print each cycle's report as JSON")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    s.set_defaults(func=cmd_consolidate)

    s = sub.add_parser("graph", help="inspect the LTM graph: export it (JSON or GraphML) and render a picture")
    s.add_argument("--store", required=True, help=STORE_HELP)
    s.add_argument("--export", help="FILE.json (node-link) or FILE.graphml; a picture FILE.png is drawn next to it")
    s.add_argument("--plot", help="picture file (default: next to --export)")
    s.add_argument("--max-nodes", type=int, default=60, help="nodes in the picture, best supported first (default 60)")
    s.add_argument("--include-dropped", action="store_true", help="also export nodes and edges decay dropped")
    s.add_argument("--json", action="store_true", help="print the graph's counts as JSON")
    s.set_defaults(func=cmd_graph)

    s = sub.add_parser("delete-user", help="erase a user's turns, items and history")
    s.add_argument("user")
    s.add_argument("--store", required=True, help=STORE_HELP)
    s.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    s.set_defaults(func=cmd_delete_user)

    s = sub.add_parser("backup", help="copy a consistent snapshot of a store to a file, while others may write",
                       epilog="The backup is itself a store (--store OUT opens it). A postgresql:// store is backed up "
                              "with pg_dump: the command prints the one to run.")
    s.add_argument("out", metavar="OUT", help="backup file (.sqlite), or a folder to hold lightmem.sqlite")
    s.add_argument("--store", required=True, help=STORE_HELP)
    s.add_argument("--force", action="store_true", help="replace an existing OUT")
    s.set_defaults(func=cmd_backup)

    s = sub.add_parser("restore", help="replace a store by a backup (checked first; written atomically)",
                       epilog="Refused while another process has the store open (even with --force): stop it first "
                              "(a server: stop it, restore, start it). A store path that is a symbolic link is "
                              "followed: the file it points to is replaced, the link stays. A store file with other "
                              "names (hard links) is refused: a process may have it open through one of them unseen.")
    s.add_argument("backup", metavar="BACKUP", help="a file made by `lightmem backup`")
    s.add_argument("--store", required=True, help="store folder or .sqlite file to replace or create")
    s.add_argument("--force", action="store_true", help="replace a store that holds data or cannot be read")
    s.set_defaults(func=cmd_restore)

    s = sub.add_parser("compact", help="rewrite a store's files without deleted data and give the space back",
                       description="Embedded store: VACUUM, then empty the write-ahead log (deleted text is already "
                                   "zeroed there; this reclaims the space). PostgreSQL: VACUUM (FULL, ANALYZE) of "
                                   "lightmem's tables, VACUUM FULL pg_statistic, CHECKPOINT. Plain VACUUM (autovacuum) "
                                   "leaves deleted rows' bytes in the table files; VACUUM FULL writes the tables anew, "
                                   "locking each while it is rewritten. The report lists what may still hold deleted text.")
    s.add_argument("--store", required=True, help="store folder, .sqlite file or postgresql:// URI")
    s.add_argument("--wal", action="store_true",
                   help="PostgreSQL: also switch and checkpoint the server's WAL until every segment file in pg_wal "
                        "was written over (a superuser's URI; one 16 MB segment per round)")
    s.set_defaults(func=cmd_compact)

    s = sub.add_parser("check", help="check a store's file for corruption (SQLite's integrity check)")
    s.add_argument("--store", required=True, help="store folder or .sqlite file")
    s.set_defaults(func=cmd_check)

    s = sub.add_parser("serve", help="serve stores over HTTP to many agents (API keys scoped to users; OpenAPI at /docs)",
                       epilog='KEYS.json: {"<key>": ["alice", "bob"], "<admin key>": ["*"]}')
    s.add_argument("--store", required=True, help=STORE_HELP)
    s.add_argument("--keys", required=True, metavar="KEYS.json", help="JSON object: API key -> user ids it may act for ('*': all)")
    s.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--workers", type=int, default=1, help="worker processes; each loads the models once (default 1)")
    s.add_argument("--encoder", choices=ENCODER_CHOICES, help=ENCODER_HELP)
    s.add_argument("--selector", choices=["trained", "none"], default="trained", help="Stage 2 (default: the learned ranker)")
    s.add_argument("--max-body-bytes", type=int, default=1 << 20, help="larger request bodies get 413 (default 1 MiB)")
    s.add_argument("--max-turn-chars", type=int, default=MAX_TURN_CHARS, metavar="N",
                   help=f"longer turns are refused with 422, never cut (default {MAX_TURN_CHARS:,} characters)")
    s.add_argument("--cache-mb", type=_cache_mb, metavar="MB",
                   help=f"ceiling of each worker's per-user in-memory indexes; the least recently served users' "
                        f"are dropped and rebuilt from the store when next used (default {DEFAULT_CACHE_MB:g}; 0: none)")
    s.add_argument("--index-here", action=argparse.BooleanOptionalAction, default=True,
                   help="each worker embeds what the store's queue holds (the default); --no-index-here: an API replica "
                        "beside `lightmem worker` processes (a PostgreSQL store)")
    s.add_argument("--malloc-arenas", type=int, metavar="N",
                   help="glibc malloc arenas per worker: bounds the memory its threads leave allocated (default 2, "
                        "or $LIGHTMEM_MALLOC_ARENAS; 0: glibc's default, 8 per core; a MALLOC_ARENA_MAX in the environment wins)")
    s.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="answer Prometheus on this port (same --host) with every worker's metrics: latency per route, "
                        "backlog, embeddings, view cache, connections (needs the metrics extra; default: no metrics)")
    s.add_argument("--otel", action="store_true",
                   help="OpenTelemetry spans of add, search, build_context and embedding, exported by OTLP as the "
                        "OTEL_EXPORTER_OTLP_* variables say (needs opentelemetry-sdk and an OTLP exporter)")
    s.set_defaults(func=cmd_serve)

    s = sub.add_parser("worker", help="embed what API processes wrote to a PostgreSQL store: drain its shared queue (no HTTP)",
                       description="Claims batches of the store's embedding jobs with a lease, embeds them with the store's "
                       "encoder and stores the vectors. Run any number, on any host that reaches the database; SIGTERM "
                       "stops one after its batch, and a killed one's batch is taken by another when its lease runs out.")
    s.add_argument("--store", required=True, metavar="postgresql://...", help="the store's PostgreSQL URI")
    s.add_argument("--device", default="cpu", help="cpu (default) or cuda[:N]: the fp32 encoder on a GPU (for a store "
                   "written by it; a store written by the int8 CPU encoder needs cpu)")
    s.add_argument("--batch-size", type=int, metavar="N", help="items per claim and encoder call (default 64; 512 on a GPU)")
    s.add_argument("--lease", type=float, metavar="S", help="seconds a claimed batch stays this worker's (default 30)")
    s.add_argument("--drain", action="store_true", help="exit once nothing is left to claim")
    s.add_argument("--report-every", type=float, default=10.0, metavar="S", help="seconds between progress lines (-v)")
    s.add_argument("--pool-size", type=int, metavar="N", help="database connections of this worker (default 4)")
    s.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="answer Prometheus on this port: embedded items, time per batch, the queue (needs the metrics extra)")
    s.add_argument("--metrics-host", default="127.0.0.1", help="interface of --metrics-port (default 127.0.0.1)")
    s.add_argument("--consolidate", action="store_true",
                   help="also run the consolidation cycles that writers with LTM request (one worker per user at a time)")
    s.add_argument("--no-nlp", action="store_true",
                   help="with --consolidate: rules only, no spaCy parser / NER (faster, coarser graph)")
    s.set_defaults(func=cmd_worker)

    s = sub.add_parser("mcp", help="serve one user's memory to an MCP client (stdio): add, search, list, delete, build context")
    s.add_argument("--store", required=True, help=STORE_HELP)
    s.add_argument("--user", required=True, help="the user every tool acts for")
    s.add_argument("--encoder", choices=ENCODER_CHOICES, help=ENCODER_HELP)
    s.add_argument("--selector", choices=["trained", "none"], default="trained", help="Stage 2 (default: the learned ranker)")
    s.set_defaults(func=cmd_mcp)

    s = sub.add_parser("data", help="list the datasets, or fetch those not committed (sha256-checked)",
                       description="Datasets live in the repository's data/ folder (or $LIGHTMEM_DATA). "
                       "`list` shows each file's state; `fetch` brings the files not committed.")
    s.add_argument("action", choices=["list", "fetch"])
    s.add_argument("names", nargs="*", help="files to fetch (default: every file not committed); see `lightmem data list`")
    s.add_argument("--from", dest="source", metavar="DIR", help="copy from a folder laid out like data/ instead of downloading")
    s.add_argument("--full", action="store_true", help="also download the whole official releases (held-out parts included)")
    s.add_argument("--no-verify", action="store_true", help="accept a downloaded release whose records differ from the pinned hash")
    s.set_defaults(func=cmd_data)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from lightmem.metric_logger import quiet_third_party_logs

    quiet_third_party_logs()
    try:
        _check_user(args)
        return args.func(args)
    except StoreFullError as exc:
        resume = " A rerun of the same `lightmem ingest` skips the turns already stored." if args.command == "ingest" else ""
        console.print(f"[red]error:[/red] {escape(str(exc) + resume)}", soft_wrap=True)
        return EXIT_STORE_FULL
    except (LightMemError, FileNotFoundError) as exc:
        # soft_wrap: the terminal wraps the line, so the commands and paths a message gives copy whole
        console.print(f"[red]error:[/red] {escape(str(exc))}", soft_wrap=True)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
