"""Rebuild data/manifest.json from the files in data/ (and, for fetched files, a folder that holds them).

    python data/build_manifest.py [--fetched-from DIR]

Run after changing a committed data file; the manifest pins every file's sha256.
"""
from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

from lightmem.datasets.catalog import MANIFEST, content_sha256, sha256_file

HERE = Path(__file__).resolve().parent
CC = "CC BY-NC 4.0 (locomo/LICENSE.txt)"
MIT = "MIT (longmemeval/LICENSE)"
SOURCES = {
    "locomo10": {"url": "https://raw.githubusercontent.com/snap-research/LoCoMo/main/data/locomo10.json",
                 "file": "locomo/locomo10.json", "sha256": None},
    "longmemeval_s": {"url": "https://huggingface.co/datasets/xiaowu0162/longmemeval-cleaned/resolve/main/longmemeval_s_cleaned.json",
                      "file": "longmemeval/longmemeval_s_cleaned.json", "sha256": None},
    "longmemeval_oracle": {"url": "https://huggingface.co/datasets/xiaowu0162/longmemeval-cleaned/resolve/main/longmemeval_oracle.json",
                           "file": "longmemeval/longmemeval_oracle.json", "sha256": None},
}
# name -> (path, committed, license, source, select)
FILES = {
    "locomo_dev": ("locomo/locomo_dev.json.gz", True, CC, "locomo10", {"key": "sample_id", "ids": "locomo_dev"}),
    "longmemeval_oracle_dev": ("longmemeval/longmemeval_oracle_dev.json.gz", True, MIT, "longmemeval_oracle",
                               {"key": "question_id", "ids": "longmemeval_oracle_dev"}),
    "longmemeval_s_dev_sample": ("longmemeval/longmemeval_s_dev_sample.json.gz", True, MIT, "longmemeval_s",
                                 {"key": "question_id", "ids": "longmemeval_s_dev_sample"}),
    "longmemeval_s_dev": ("longmemeval/longmemeval_s_dev.json.gz", False, MIT, "longmemeval_s",
                          {"key": "question_id", "ids": "longmemeval_s_dev"}),
}
ID_LISTS = ["longmemeval/dev_question_ids.json", "locomo/dev_ids.json"]


def _records(path: Path) -> list:
    return json.load(gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--fetched-from", type=Path, help="a folder laid out like data/ that holds the fetched files")
    args = ap.parse_args()
    files = {}
    for name, (rel, committed, lic, source, select) in FILES.items():
        p = HERE / rel if committed or args.fetched_from is None else args.fetched_from / rel
        files[name] = {"path": rel, "sha256": sha256_file(p), "size": p.stat().st_size, "committed": committed,
                       "license": lic, "source": source, "select": select, "content_sha256": content_sha256(_records(p))}
    manifest = {"files": files, "sources": SOURCES, "id_lists": ID_LISTS}
    (HERE / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {HERE / MANIFEST}")


if __name__ == "__main__":
    main()
