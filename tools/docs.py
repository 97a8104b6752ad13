"""Regenerate the results tables of docs/results/README.md and checkpoints/README.md (and the figure of docs/figures/),
or record a run for them.

    python tools/docs.py                 # = make docs: rewrite every generated block from the committed files
    python tools/docs.py --check         # exit 1 when a committed block differs from what the files render
    python tools/docs.py record outputs/locomo/results.json --table reader --name "BM25 over raw turns" \\
        --command "python eval/locomo.py ... +experiment=baseline_bm25"

A table's rows live in docs/results/runs/<table>.json, each with the command that produced it and the date;
``record`` adds a row (or replaces the row of the same name) from a finished run's results.json.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lightmem.evaluation.reports.tables import (  # noqa: E402
    DOCS_WITH_TABLES,
    GPU_READER_FIGURE,
    RUN_TABLES,
    gpu_reader_figure,
    gpu_reader_scores,
    render_tables,
    replace_blocks,
    run_summary,
)


def regenerate(check: bool, root: Path = ROOT) -> int:
    rendered = render_tables(root)
    stale = []
    for doc in DOCS_WITH_TABLES:
        path = root / doc
        text = path.read_text()
        new = replace_blocks(text, rendered)
        if new != text:
            stale.append(doc)
            if not check:
                path.write_text(new)
    scores = gpu_reader_scores(root)
    if scores is not None:
        figure = root / GPU_READER_FIGURE
        if not check:
            gpu_reader_figure(*scores, figure)
        elif not figure.exists():
            stale.append(GPU_READER_FIGURE)
    verb = "differ from their files (run `make docs`)" if check else "rewritten"
    print(f"{', '.join(stale)}: {verb}" if stale else "every generated table is up to date")
    return 1 if check and stale else 0


def record(args: argparse.Namespace, root: Path = ROOT) -> int:
    path = root / "docs" / "results" / "runs" / f"{args.table}.json"
    runs = json.loads(path.read_text())["runs"] if path.exists() else []
    row = {"name": args.name, "command": args.command, "date": args.date or datetime.date.today().isoformat(),
           "summary": run_summary(json.loads(Path(args.results).read_text()))}
    if args.controls_only:
        row["controls_only"] = True
    names = [r["name"] for r in runs]
    if args.name in names:
        runs[names.index(args.name)] = row
    else:
        runs.append(row)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"runs": runs}, indent=2, ensure_ascii=False) + "\n")
    print(f"{path.relative_to(root)}: {len(runs)} rows; run `make docs` to render them")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a generated table is stale")
    sub = parser.add_subparsers(dest="action")
    rec = sub.add_parser("record", help="add a finished run to a results table")
    rec.add_argument("results", help="the run's results.json")
    rec.add_argument("--table", required=True, choices=sorted(RUN_TABLES))
    rec.add_argument("--name", required=True, help="the row's label (a row of the same name is replaced)")
    rec.add_argument("--command", required=True, help="the command that produced the run")
    rec.add_argument("--date", help="when it ran (default: today)")
    rec.add_argument("--controls-only", action="store_true",
                     help="show only the control rows this run answered (qa.controls=true), not the run itself")
    args = parser.parse_args(argv)
    return record(args) if args.action == "record" else regenerate(args.check)


if __name__ == "__main__":
    sys.exit(main())
