"""Scale benchmark: users × items grid, both backends (writes numbers, asserts nothing; exits 1 on a failure).

For each grid point it builds a store (hashing embedder, 384-d vectors), then opens it in a fresh process
as a server worker would and searches every user once (cold: the user's views are loaded from the tables,
or from a large user's view snapshot) and the most recent users again (warm); it reports build items/s, the
process's RSS, what the view cache holds, the first search, cold / warm search P50 / P95, and for HNSW points
the index's recall@10 against exact search.

    python tools/scale.py                                    # 100x1000, 1000x1000 (1M items), 1x1000, 1x10000
    python tools/scale.py --grid 200x500 1x100000:hnsw       # other points; :hnsw uses the HNSW index
    python tools/scale.py --cache-mb 128                     # another ceiling (0: none)
    python tools/scale.py --store postgresql://user:pw@host/db   # PostgreSQL + pgvector (each point in a fresh database schema of its own)

Stores are built under --work (default outputs/scale/stores) and kept for reruns (--rebuild to rebuild);
writes OUT/results.json, OUT/results.md and OUT/scale.png (OUT: --out, default outputs/scale).
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

from lightmem.evaluation.benchmarks.scale import Result, build, parse_point, serve_in_child, write_report

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--grid", nargs="+", default=["100x1000", "1000x1000", "1x1000", "1x10000"],
                   help="points USERSxITEMS[:hnsw] (items per user)")
    p.add_argument("--cache-mb", type=float, default=None, help="view cache ceiling of the serving process (default: the store's)")
    p.add_argument("--snapshot-min-items", type=int, default=None,
                   help="users with this many items get a view snapshot (embedded store; 0: none; default: the store's)")
    p.add_argument("--store", default=None, help="a postgresql:// URI instead of embedded stores under --work")
    p.add_argument("--work", type=Path, default=ROOT / "outputs/scale/stores")
    p.add_argument("--out", type=Path, default=ROOT / "outputs/scale")
    p.add_argument("--rebuild", action="store_true", help="rebuild stores that exist")
    args = p.parse_args(argv)
    try:
        points = [parse_point(g) for g in args.grid]
    except ValueError as exc:
        p.error(str(exc))
    results: list[Result] = []
    for point in points:
        if args.store:
            location, backend = args.store, "postgres"  # one database: each point's users are its own
            if len(points) > 1:
                p.error("--store postgresql://... takes one grid point per run (users of different points would mix)")
        else:
            location, backend = str(args.work / point.name), "sqlite"
        result = Result(point, backend)
        fresh = args.store is not None or args.rebuild or not (Path(location) / "lightmem.sqlite").exists()
        if fresh:
            if not args.store:
                shutil.rmtree(location, ignore_errors=True)
            result.build_s = build(location, point)
        print(f"{point.name}: built in {result.build_s:.0f} s; serving in a fresh process ...", flush=True)
        try:
            result.serve = serve_in_child(location, point, args.cache_mb, args.snapshot_min_items)
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
            return 1
        print(f"{point.name}: {result.serve}", flush=True)
        results.append(result)
        write_report(results, args.out, {"command": "python tools/scale.py " + " ".join(argv or sys.argv[1:]),
                                         "date": time.strftime("%Y-%m-%d %H:%M")})
    print((args.out / "results.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
