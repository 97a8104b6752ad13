"""How far fact keys could lift the first hop: LoCoMo's annotated observations as extra keys of the turns they cite.

    python -m experiments.fact_keys.run --conversations 3-4             # the default encoder, dev data
    python -m experiments.fact_keys.run --conversations 0-2 --json out.json
    python -m experiments.fact_keys.run --conversations 3-4 --pipeline  # the whole read path, strict recall of the prompt
    python -m experiments.fact_keys.run --conversations 3-4 --pipeline --set retrieval.candidate_factor=8

Prints recall_all@N of a dense first hop per key and category, and each key's paired-bootstrap difference from the
plain text key (experiments/fact_keys/ceiling.py says what each key is). With --pipeline: the default pipeline
(conf/locomo.yaml, changed by --set) stores each memory under its text + facts, ranks as it serves, and packs
the memory as written; printed per category are the Stage-1 pool's recall_all and strict recall_all@budget.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from experiments.fact_keys.ceiling import CATEGORIES, KEYS, conversation_ranks, pipeline_ceiling, recall_table
from lightmem.build import ENCODER_CHOICES, new_embedder
from lightmem.datasets.catalog import repo_root
from lightmem.datasets.formats import read_json
from lightmem.datasets.locomo import parse_locomo, parse_selection
from lightmem.errors import InvalidInputError
from lightmem.evaluation.harnesses.locomo import CATEGORY_NAMES
from lightmem.evaluation.reports.report import markdown_table
from lightmem.metrics.stats import paired_bootstrap

NAMES = {**{c: CATEGORY_NAMES[int(c)] for c in CATEGORIES}, "all": "all"}


def main(argv: list[str] | None = None) -> int:
    head, _, recipe = __doc__.partition("\n\n")
    ap = argparse.ArgumentParser(description=head, epilog=recipe, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=repo_root() / "data/locomo/locomo_dev.json.gz",
                    help="a LoCoMo file whose samples carry `observation` (default: the dev file)")
    ap.add_argument("--conversations", default="all", help='"3-4", "0,2", "all" (indices into the file)')
    ap.add_argument("--encoder", choices=ENCODER_CHOICES, default="tuned")
    ap.add_argument("--ns", default="10,20,50,100", help="the N of recall_all@N")
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    ap.add_argument("--pipeline", action="store_true", help="through the whole read path (Stage 1, the served ranker, "
                    "the composed prompt) instead of a dense first hop")
    ap.add_argument("--budget", type=int, default=600, help="with --pipeline: tokens of the composed prompt")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="with --pipeline: a Hydra override of conf/locomo.yaml (repeatable)")
    args = ap.parse_args(argv)
    try:
        ns = [int(n) for n in args.ns.split(",")]
        raw = read_json(args.data)
        raw = raw if isinstance(raw, list) else [raw]
        convs = parse_locomo(raw)
        if len(convs) != len(raw):
            raise InvalidInputError(f"{args.data}: {len(raw) - len(convs)} samples could not be read")
        chosen = parse_selection(args.conversations, len(convs))
        if not all(isinstance(i, int) and 0 <= i < len(convs) for i in chosen):
            raise InvalidInputError(f"--conversations {args.conversations!r}: indices 0-{len(convs) - 1} only")
        if not any(r.get("observation") for r in (raw[i] for i in chosen)):
            raise InvalidInputError(f"{args.data}: the chosen samples carry no `observation` facts")
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.pipeline:
        return pipeline_main(args, [convs[i] for i in chosen], [raw[i] for i in chosen])
    embedder = new_embedder(args.encoder)
    rows = []
    for i in chosen:
        rows += conversation_ranks(convs[i], raw[i], embedder)
        print(f"conversation {i}: {len(rows)} questions so far", file=sys.stderr, flush=True)
    if not rows:
        print("error: no answerable question with evidence in the chosen conversations", file=sys.stderr)
        return 2
    table = recall_table(rows, ns)
    cats = [c for c in NAMES if table["text"][c]]
    header = ["key", *(f"{NAMES[c]} @{n}" for c in cats for n in ns)]
    print(markdown_table(header, [[k, *(f"{np.mean(table[k][c][n]):.3f}" for c in cats for n in ns)] for k in KEYS]))
    diffs = {}
    for k in KEYS[1:]:
        for c in ("1", "all"):
            for n in ns:
                if table[k][c][n]:
                    r = paired_bootstrap(table[k][c][n], table["text"][c][n], args.resamples)
                    diffs[f"{k} - text/{NAMES[c]}@{n}"] = r.to_dict()
                    print(f"{k} − text, {NAMES[c]} @{n}: {r.diff:+.3f} [{r.ci_low:+.3f}, {r.ci_high:+.3f}]")
    if args.json:
        args.json.write_text(json.dumps({"n": len(rows), "recall_all": {k: {c: {n: float(np.mean(v)) for n, v in by.items()}
                                                                            for c, by in table[k].items()} for k in KEYS},
                                         "paired": diffs, "args": {k: str(v) for k, v in vars(args).items()}}, indent=1))
    return 0


def pipeline_main(args: argparse.Namespace, convs: list, raws: list) -> int:
    """--pipeline: both keys through the composed read path; a table per category and the paired differences."""
    from hydra import compose, initialize_config_dir

    from lightmem.evaluation.runs.entry import register_configs

    register_configs()
    try:
        with initialize_config_dir(config_dir=str(repo_root() / "conf"), version_base="1.3"):
            cfg = compose("locomo", overrides=list(args.set))
        rows = pipeline_ceiling(cfg, convs, raws, args.budget, show_progress=sys.stderr.isatty())
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not rows:
        print("error: no answerable question with evidence in the chosen conversations", file=sys.stderr)
        return 2
    keys = ("text", "text+facts")
    cats = [c for c in CATEGORIES if any(r["category"] == c for r in rows)] + ["all"]
    pick = lambda c: [r for r in rows if c == "all" or r["category"] == c]  # noqa: E731
    header = ["key", *(f"{NAMES[c]} {m}" for c in cats for m in ("pool", f"strict@{args.budget}"))]
    print(markdown_table(header, [[k, *(f"{np.mean([r[k][m] for r in pick(c)]):.3f}" for c in cats for m in ("pool", "strict"))]
                                  for k in keys]))
    diffs = {}
    for c in ("1", "all"):
        for m in ("pool", "strict"):
            sel = pick(c)
            r = paired_bootstrap([x["text+facts"][m] for x in sel], [x["text"][m] for x in sel], args.resamples)
            diffs[f"text+facts - text/{NAMES[c]}/{m}"] = r.to_dict()
            print(f"text+facts − text, {NAMES[c]} {m}: {r.diff:+.3f} [{r.ci_low:+.3f}, {r.ci_high:+.3f}] ({len(sel)} q.)")
    if args.json:
        args.json.write_text(json.dumps({"n": len(rows), "rows": rows, "paired": diffs,
                                         "args": {k: str(v) for k, v in vars(args).items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
