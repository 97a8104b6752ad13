"""Score LoCoMo or LongMemEval runs recorded with ``llm=record`` against answers made elsewhere
(``tools/answer_prompts.py``): F1 per category (LongMemEval: per question type) and BLEU-1 of each run, and the first run
against each other one (paired bootstrap over the questions).

    python tools/score_answers.py --answers outputs/prompts/answers.jsonl.gz \\
        defaults=outputs/rec_defaults bm25=outputs/rec_bm25 --controls --out outputs/prompts/scores.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lightmem.datasets.formats import read_json  # noqa: E402
from lightmem.evaluation.reports.offline_answers import answers_by_id, compare, score_run, summarize  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="NAME=RUN_DIR: an eval/locomo.py or eval/longmemeval.py out_dir recorded with llm=record")
    ap.add_argument("--answers", action="append", required=True, help="an answer file of tools/answer_prompts.py (repeat for more)")
    ap.add_argument("--controls", action="store_true", help="also score the first run's gold and random contexts")
    ap.add_argument("--resamples", type=int, default=2000)
    ap.add_argument("--out", type=Path, help="write the scores as JSON")
    args = ap.parse_args(argv)
    answers = answers_by_id(args.answers)
    scored = {}
    for spec in args.runs:
        name, sep, folder = spec.partition("=")
        if not sep:
            ap.error(f"{spec!r}: expected NAME=RUN_DIR")
        questions = read_json(Path(folder) / "questions.jsonl")
        scored[name] = score_run(questions, answers)
        if args.controls and len(scored) == 1:
            for control in ("gold", "random"):
                scored[f"{name}/{control} context"] = score_run(questions, answers, control)
    summaries = {name: summarize(s) for name, s in scored.items()}
    cats = sorted({c for s in summaries.values() for c in s["f1_by_category"]})
    print("| run | n | " + " | ".join(f"F1 {c}" for c in cats) + " | F1 | BLEU-1 |")
    print("|---|---|" + "---|" * (len(cats) + 2))
    for name, s in summaries.items():
        print(f"| {name} | {s['n']} | " + " | ".join(f"{s['f1_by_category'].get(c, float('nan')):.3f}" for c in cats)
              + f" | {s['f1']:.3f} | {s['bleu1']:.3f} |")
    first = next(iter(scored))
    diffs = {name: compare(scored[first], s, args.resamples) for name, s in scored.items() if name != first}
    for name, d in diffs.items():
        print(f"{first} - {name}: F1 {d['diff']:+.3f} [{d['ci_low']:+.3f}, {d['ci_high']:+.3f}] p={d['p_value']:.3f} (n={d['n']})")
    if args.out:
        args.out.write_text(json.dumps({"summaries": summaries, "versus_first": diffs}, indent=2))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
