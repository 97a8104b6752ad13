"""What a newcomer's first ``Memory.open`` costs: its time, the bytes it writes, and what it leaves in the model cache;
then the same for the second open, which finds everything prepared.

    python tools/first_run.py                    # the default encoder, a new cache and store in a temporary folder
    python tools/first_run.py --encoder minilm   # another encoder choice (tuned, minilm, mpnet, hashing)
    python tools/first_run.py --keep /tmp/fr     # keep the cache and stores there instead of removing them

Each open runs in a fresh process with ``LIGHTMEM_CACHE`` pointing at the new cache; bytes written are the process's
``wchar`` from /proc/self/io (every byte handed to write(), temporary files included; Linux only), and the CPU time
is the process's (user + system, imports included), which moves less than the wall time when others share the cores.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = """
import json, sys, time
t0 = time.perf_counter()
from lightmem import Memory
t1 = time.perf_counter()
with Memory.open(sys.argv[1], encoder=sys.argv[2]) as memory:
    t2 = time.perf_counter()
    memory.add("I adopted a dog named Rex.", user_id="alice")
    memory.flush_index()
    memory.build_context("What is my dog called?", user_id="alice")
io = {}
try:
    with open("/proc/self/io") as f:
        io = {k: int(v) for k, v in (line.split(":") for line in f)}
except OSError:
    pass
import resource
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"import_s": t1 - t0, "open_s": t2 - t1, "cpu_s": ru.ru_utime + ru.ru_stime, "written_bytes": io.get("wchar")}))
"""


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()) if folder.exists() else 0


def one_open(cache: Path, store: Path, encoder: str) -> dict:
    env = {**os.environ, "LIGHTMEM_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(store), encoder], env=env, capture_output=True, text=True,
                          cwd=cache.parent)  # not the caller's folder, which `python -c` would put first on the path
    if proc.returncode != 0:
        raise SystemExit(f"the open failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["stderr"] = [line for line in proc.stderr.splitlines() if line.startswith("lightmem:")]
    result["cache_bytes"] = folder_bytes(cache)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--encoder", default="tuned", choices=("tuned", "minilm", "mpnet", "hashing"))
    parser.add_argument("--keep", help="a folder to keep the cache and the stores in (default: a temporary one, removed)")
    args = parser.parse_args(argv)
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="lightmem-first-run-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        rows = {name: one_open(work / "cache", work / f"store-{name}", args.encoder) for name in ("first", "second")}
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    for name, r in rows.items():
        written = "?" if r["written_bytes"] is None else f"{r['written_bytes'] / 1e6:,.0f} MB"
        print(f"{name} open: Memory.open {r['open_s']:.1f} s (imports {r['import_s']:.1f} s; CPU {r['cpu_s']:.1f} s in all), written {written}, "
              f"cache {r['cache_bytes'] / 1e6:,.0f} MB")
        for line in r["stderr"]:
            print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
