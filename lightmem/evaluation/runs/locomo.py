"""One LoCoMo run from its config: the systems under test (a Memory or a baseline), the QA options
and the error injectors, the harness (``lightmem.evaluation.harnesses.locomo``), the files and the logged metrics.
``eval/locomo.py`` is the thin entry point."""
from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig

from lightmem.config import SharedRuntime, build_embedder, build_memory, make_run_logger, to_container
from lightmem.datasets import load_locomo, select_conversations
from lightmem.datasets.formats import Conversation
from lightmem.errors import InvalidInputError
from lightmem.evaluation.harnesses.inject import NoisyController, NoisyWriter, pools, saturate
from lightmem.evaluation.harnesses.locomo import evaluate_locomo
from lightmem.evaluation.harnesses.system import System
from lightmem.evaluation.reports.failures import failures_md, qa_failures
from lightmem.evaluation.reports.report import plot_recall, qa_table, retrieval_table
from lightmem.evaluation.runs.common import qa_options
from lightmem.metric_logger import log_results, quiet_third_party_logs
from lightmem.models.prompt_tokens import prompt_counter
from lightmem.seeding import seed_everything


def system_factory(cfg: DictConfig, stores: Path, embedder, shared: SharedRuntime,
                   everything: Sequence[Conversation]) -> Callable[[str], System]:
    """``make(conv_id)``: a fresh system for one conversation, with the configured injectors."""
    baseline = cfg.get("system")
    if baseline is not None and not (isinstance(baseline, DictConfig) and "_target_" in baseline):
        raise InvalidInputError(f"system must be null (the Memory) or a baseline node with a _target_, got {baseline!r}")
    inject = cfg.get("inject") or {}
    seed = int(cfg.get("seed", 0))

    def make(conv_id: str) -> System:
        if baseline is not None:
            return instantiate(baseline, counter=prompt_counter(cfg.memory.get("tokenizer"), embedder),
                               group_dates=bool(cfg.memory.get("group_dates", True)))
        memory = build_memory(cfg, stores / conv_id, embedder=embedder, shared=shared)
        questions, texts = pools(everything, conv_id)
        if float(inject.get("hq_noise", 0)) > 0:
            memory.controller = NoisyController(memory.controller, questions, float(inject.hq_noise), seed)
        if float(inject.get("write_noise", 0)) > 0:
            memory.writer = NoisyWriter(memory.writer, texts, float(inject.write_noise), seed)
        return memory

    return make


def after_ingest_hook(cfg: DictConfig, everything: Sequence[Conversation]) -> Callable | None:
    """The update-gap saturation: irrelevant recent turns written after consolidation, before the questions."""
    ratio = float((cfg.get("inject") or {}).get("saturation", 0))
    if ratio <= 0:
        return None
    seed = int(cfg.get("seed", 0))

    def hook(memory, conv: Conversation) -> dict[str, Any]:
        _, texts = pools(everything, conv.conv_id)
        return {"injected_noise_turns": saturate(memory, conv.conv_id, conv, texts, ratio, seed)}

    return hook


def run(cfg: DictConfig, quiet: bool = False) -> dict[str, Any]:
    """Evaluate and write results.json, questions.jsonl, results.md and recall.png to out_dir.

    ``results["failures"]`` lists what did not complete (QA calls whose backend failed); the
    numbers are written either way, and ``eval/locomo.py`` exits non-zero when it is not empty.
    """
    quiet_third_party_logs()
    seed_everything(int(cfg.seed))
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    everything = load_locomo(cfg.data.path)  # the other conversations are the injectors' noise pools
    convs = select_conversations(everything, cfg.data.conversations)
    embedder = build_embedder(cfg)
    shared = SharedRuntime(cfg)  # one LLM runtime / spaCy pipeline for all conversations
    stores = out / "stores"
    shutil.rmtree(stores, ignore_errors=True)  # our own scratch stores from a previous run of this folder

    ks = sorted(int(k) for k in cfg.ks)
    results, records = evaluate_locomo(
        system_factory(cfg, stores, embedder, shared, everything), convs, ks=ks, budget=int(cfg.budget),
        categories=list(cfg.data.categories), show_progress=sys.stderr.isatty(), max_questions=cfg.data.max_questions,
        qa_options=qa_options(cfg, shared), after_ingest=after_ingest_hook(cfg, everything), seed=int(cfg.seed),
    )
    if not cfg.keep_stores:
        shutil.rmtree(stores, ignore_errors=True)
    results["config"] = to_container(cfg)
    results["config"]["conversation_ids"] = [c.conv_id for c in convs]
    results["failures"] = qa_failures(results["cost"].get("llm_qa", {}))
    (out / "results.json").write_text(json.dumps(results, indent=2))
    with open(out / "questions.jsonl", "w") as fh:
        for r in records:
            fh.write(json.dumps(r.__dict__) + "\n")
    table = retrieval_table(results, ks, int(cfg.budget))
    if "qa" in results:
        table += "\n\n" + qa_table(results)
    (out / "results.md").write_text(f"# LoCoMo ({', '.join(c.conv_id for c in convs)})\n\n{table}\n{failures_md(results['failures'])}")
    plot_recall(results, ks, out / "recall.png")
    if not quiet:
        print(table)
        print(f"\nwrote {out}/results.json, results.md, questions.jsonl, recall.png")

    log_results(make_run_logger(cfg.logger, out, "locomo"), results["config"], metrics(results), out / "results.json")
    return results


def metrics(results: dict[str, Any]) -> dict[str, float | None]:
    """The flat numbers of a run, as logged: ``eval/`` (overall retrieval), ``latency/``, ``qa/`` (overall QA)."""
    flat = {f"eval/{k}": v for k, v in results["retrieval"]["overall"].items()}
    flat.update({f"latency/{k}": v for k, v in results["latency"].items()})
    flat.update({f"qa/{k}": v for k, v in results.get("qa", {}).get("overall", {}).items()})
    return flat
