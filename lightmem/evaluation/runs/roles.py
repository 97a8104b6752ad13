"""One role benchmark run from its config: every listed controller, selector and writer setting built and
timed by ``lightmem.evaluation.benchmarks.roles`` (``eval/roles.py`` is the thin entry point)."""
from __future__ import annotations

import json
import platform
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from lightmem.config import PipelineConfig, SharedRuntime, build_embedder, build_memory, compose_option, to_container
from lightmem.datasets import load_locomo, select_conversations
from lightmem.evaluation.benchmarks.roles import bench_role, controller_inputs, roles_table, run_controller, run_writer
from lightmem.evaluation.reports.failures import failures_md
from lightmem.evaluation.schemas import LocomoDataConfig
from lightmem.metric_logger import quiet_third_party_logs
from lightmem.types import Filters


@dataclass
class RolesBenchConfig(PipelineConfig):
    data: LocomoDataConfig = field(default_factory=LocomoDataConfig)
    conversation: Any = 0
    controllers: list[str] = field(default_factory=lambda: ["passthrough", "fast", "experimental/generative"])
    selectors: list[str] = field(default_factory=lambda: ["none", "experimental/generative", "cross_encoder"])
    writers: list[str] = field(default_factory=lambda: ["turn", "extractive", "experimental/generative"])
    k: int = 10
    n_queries: int = 100
    n_queries_generative: int = 10
    n_turns: int = 200
    n_turns_generative: int = 24
    turns_per_batch: int = 8
    out_dir: str = "outputs/roles"
    optimized_metric: str | None = None


SCHEMA = ("schema_roles", RolesBenchConfig)  # conf/roles.yaml extends it


CONF = Path(__file__).resolve().parents[3] / "conf"  # the repository's conf/ (a running Hydra app uses its own)


def compose_group(group: str, option: str) -> DictConfig:
    return compose_option(CONF, "roles", group, option)


def _generative(setting: str) -> bool:
    """A setting that calls the LLM (``experimental/generative``), benchmarked on fewer inputs."""
    return setting.rsplit("/", 1)[-1] == "generative"


def build_role(shared: SharedRuntime, group: str, setting: str) -> tuple[object | None, dict | None]:
    """(the role, None), or (None, a skipped row) when the setting cannot be built (e.g. an untrained checkpoint)."""
    try:
        return shared.role(compose_group(group, setting)), None
    except Exception as exc:  # noqa: BLE001  (reported in results.md and as a failure; the other settings still run)
        reason = str(exc.__cause__ or exc).splitlines()[0][:200]
        return None, {"role": group, "setting": setting, "unit": "turn" if group == "writer" else "query", "n": 0, "units": 0,
                      "ms_p50": float("nan"), "ms_p95": float("nan"), "ms_per_unit": float("nan"), "llm_calls_per_unit": 0,
                      "llm_tokens_per_unit": 0, "llm_failures": 0, "skipped": reason}


def skipped_failures(rows: list[dict]) -> list[str]:
    """A failure per role setting that could not be benchmarked."""
    return [f"{r['role']}={r['setting']} skipped: {r['skipped']}" for r in rows if "skipped" in r]


def run(cfg: DictConfig) -> dict[str, Any]:
    """Benchmark every configured role setting; one that cannot be built is skipped and listed in ``failures``."""
    quiet_third_party_logs()
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    conv = select_conversations(load_locomo(cfg.data.path), cfg.conversation)[0]
    turns = conv.turns
    questions = [q.question for q in conv.qa if q.category in (1, 2, 3, 4)]
    now = max(s.timestamp for s in conv.sessions)
    stm = [t.render() for t in turns[-6:]]
    shared = SharedRuntime(cfg)
    embedder = build_embedder(cfg)
    store = out / "store"
    shutil.rmtree(store, ignore_errors=True)
    memory = build_memory(cfg, store, embedder=embedder, shared=shared)
    for s in conv.sessions:
        memory.add_turns(conv.conv_id, s.turns)
    memory.flush_index()
    rows = []
    for setting in cfg.controllers:
        role, skipped = build_role(shared, "controller", setting)
        if skipped:
            rows.append(skipped)
            continue
        n = cfg.n_queries_generative if _generative(setting) else cfg.n_queries
        rows.append(bench_role("controller", setting, role, "query", run_controller(role, cfg.k), controller_inputs(questions[:n], stm, now)))
    plan_of = shared.role(compose_group("controller", "passthrough"))
    for setting in cfg.selectors:
        role, skipped = build_role(shared, "selector", setting)
        if skipped:
            rows.append(skipped)
            continue
        n = cfg.n_queries_generative if _generative(setting) else cfg.n_queries
        inputs = []
        for q in questions[:n]:
            plan = plan_of.plan(q, cfg.k, Filters(), (), now)
            qv = embedder.encode([q], is_query=True)
            inputs.append((plan, [h for _, h in memory.retriever.stage1(plan, conv.conv_id, qv, now)]))
        rows.append(bench_role("selector", setting, role, "query", lambda x, r=role: r.select(x[0], x[1], cfg.k), inputs))
    for setting in cfg.writers:
        role, skipped = build_role(shared, "writer", setting)
        if skipped:
            rows.append(skipped)
            continue
        n = cfg.n_turns_generative if _generative(setting) else cfg.n_turns
        batches = [turns[i : i + cfg.turns_per_batch] for i in range(0, n, cfg.turns_per_batch)]
        rows.append(bench_role("writer", setting, role, "turn", run_writer(role), batches, [len(b) for b in batches]))
    memory.close()
    shutil.rmtree(store, ignore_errors=True)
    import torch

    device = f"{platform.machine()} CPU, {torch.get_num_threads()} threads" if not torch.cuda.is_available() else torch.cuda.get_device_name(0)
    results = {"roles": rows, "device": device, "config": to_container(cfg), "failures": skipped_failures(rows)}
    (out / "results.json").write_text(json.dumps(results, indent=2))
    table = roles_table(rows, device)
    (out / "results.md").write_text(table + "\n" + failures_md(results["failures"]))
    print(table)
    return results


def metrics(results: dict[str, Any]) -> dict[str, float | None]:
    """The flat numbers of a run: ``roles/<role>/<setting>/<measure>`` of every setting benchmarked."""
    return {f"roles/{r['role']}/{r['setting']}/{k}": v for r in results["roles"] if "skipped" not in r
            for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
