"""Two LoCoMo runs' questions, paired: per category and overall, each arm's mean and ``A − B`` with a 95 % paired
bootstrap CI (2,000 resamples) for strict recall within the budget, answer coverage, reader F1 and prompt tokens.

    python -m experiments.aggregates.compare outputs/agg/qa_agg outputs/agg/qa_def [--md out.md]

Questions are matched by (conversation, question text, evidence); a question in one run only is an error: the
runs must have asked the same questions.
"""
from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lightmem.metrics.stats import paired_bootstrap

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
MEASURES: dict[str, Callable[[Mapping[str, Any]], float | None]] = {
    "strict R_all@budget": lambda r: r["recall"]["@budget"]["all"],
    "answer coverage": lambda r: r.get("coverage"),
    "reader F1": lambda r: (r.get("qa") or {}).get("f1"),
    "prompt tokens": lambda r: r["tokens"].get("prompt", r["tokens"].get("@budget")),
}


def load(run: Path) -> dict[tuple, dict[str, Any]]:
    out = {}
    for line in (run / "questions.jsonl").read_text().splitlines():
        r = json.loads(line)
        out[(r["conv_id"], r["question"], tuple(r["evidence"]))] = r
    return out


def rows(a: Mapping[tuple, Any], b: Mapping[tuple, Any]) -> list[dict[str, Any]]:
    if a.keys() != b.keys():
        raise SystemExit(f"the runs asked different questions ({len(a.keys() ^ b.keys())} differ)")
    table = []
    for name, sel in [("all (1-4)", lambda r: True)] + [(f"{c} {n}", lambda r, c=c: r["category"] == c) for c, n in CATEGORIES.items()]:
        keys = [k for k in a if sel(a[k])]
        row: dict[str, Any] = {"questions": name, "n": len(keys)}
        for measure, get in MEASURES.items():
            xs, ys = [get(a[k]) for k in keys], [get(b[k]) for k in keys]
            pairs = [(x, y) for x, y in zip(xs, ys) if x is not None and y is not None]
            if not pairs:
                continue
            res = paired_bootstrap([x for x, _ in pairs], [y for _, y in pairs], resamples=2000, seed=0)
            row[measure] = (sum(x for x, _ in pairs) / len(pairs), sum(y for _, y in pairs) / len(pairs), res)
        table.append(row)
    return table


def markdown(table: Sequence[Mapping[str, Any]], a: str, b: str) -> str:
    measures = [m for m in MEASURES if any(m in r for r in table)]
    head = "| questions | n | " + " | ".join(f"{m}: A / B / A − B [95% CI]" for m in measures) + " |"
    lines = [f"A = `{a}`, B = `{b}`", "", head, "|" + " --- |" * (2 + len(measures))]
    for r in table:
        cells = []
        for m in measures:
            if m not in r:
                cells.append("")
                continue
            x, y, res = r[m]
            fmt = "{:.1f}" if m == "prompt tokens" else "{:.3f}"
            cells.append(f"{fmt.format(x)} / {fmt.format(y)} / {res.diff:+.3f} [{res.ci_low:+.3f}, {res.ci_high:+.3f}]")
        lines.append(f"| {r['questions']} | {r['n']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    p.add_argument("--md", type=Path, default=None, help="also write the table here")
    args = p.parse_args(argv)
    text = markdown(rows(load(args.a), load(args.b)), str(args.a), str(args.b))
    print(text)
    if args.md:
        args.md.write_text(text + "\n")


if __name__ == "__main__":
    main()
