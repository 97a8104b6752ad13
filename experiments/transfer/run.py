"""How much of the gain of training on real data a training source gets on its own (the transfer share).

    python train/embedder.py "sources=[synth]" export_dir=null out_dir=runs/emb_synth
    python train/embedder.py "sources=[longmemeval,locomo]" export_dir=null out_dir=runs/emb_real
    python eval/locomo.py data.conversations=3-4 encoder=minilm out_dir=runs/l_base
    python eval/locomo.py data.conversations=3-4 encoder.adapter=runs/emb_synth/best out_dir=runs/l_synth
    python eval/locomo.py data.conversations=3-4 encoder.adapter=runs/emb_real/best out_dir=runs/l_real
    python -m experiments.transfer.run runs/l_base runs/l_synth runs/l_real            # share = (synth - base) / (real - base)

Works as well on three eval/longmemeval.py runs. Prints a markdown table; --json writes the numbers.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from experiments.transfer.share import METRICS, transfer_share


def main(argv: list[str] | None = None) -> int:
    head, _, recipe = __doc__.partition("\n\n")
    ap = argparse.ArgumentParser(description=head, epilog=recipe, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base", help="run of the untrained model (an out_dir holding questions.jsonl)")
    ap.add_argument("part", help="run of the model trained on the source alone (e.g. synthetic data)")
    ap.add_argument("full", help="run of the model trained on the reference data (e.g. real dialogue)")
    ap.add_argument("--metric", choices=METRICS, action="append", help="recall (recall_all within the budget) and/or coverage; default both")
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args(argv)
    rows = {}
    try:
        for metric in args.metric or list(METRICS):
            res, means = transfer_share(args.base, args.part, args.full, metric, args.resamples)
            rows[metric] = {**means, **res.to_dict()}
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("| metric | n | base | part | full | part − base | full − base | share [95% CI] |")
    print("|---|---|---|---|---|---|---|---|")
    for metric, r in rows.items():
        print(f"| {metric} | {r['n']} | {r['base']:.3f} | {r['part']:.3f} | {r['full']:.3f} | {r['gain_part']:+.3f} | "
              f"{r['gain_full']:+.3f} | {r['share']:.2f} [{r['ci_low']:.2f}, {r['ci_high']:.2f}] |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
