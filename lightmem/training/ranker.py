"""The learned Stage-2 ranker: mine Stage-1 candidate groups with their features, fit a linear
model with the listwise + pointwise ranking loss, and measure recall within the token budget.

A group is one question: its text, the texts and features of its Stage-1 candidates (candidate_factor × K)
(``retrieval/features.py``), 0/1 evidence labels, token costs and the number of evidence turns.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lightmem.memory import Memory
from lightmem.models.tokens import CachedCount
from lightmem.retrieval.anchoring import check_policy, wants_dates
from lightmem.retrieval.composer import pack_by_budget
from lightmem.retrieval.engine import PACKING_SETTINGS
from lightmem.retrieval.features import FEATURES, candidate_features
from lightmem.retrieval.stage2 import candidate_text
from lightmem.retrieval.trees import ranker_scorer
from lightmem.timeutil import parse_timestamp
from lightmem.training.distill import asked_questions
from lightmem.training.groups import CandidateGroup
from lightmem.training.losses import ranking_loss
from lightmem.training.selector import split_dated


def mine_groups(make_memory: Callable[[str], Memory], convs: Sequence[Any], source: str, k: int,
                categories: Sequence[Any] | None = None, show_progress: bool = False) -> list[dict[str, Any]]:
    """One group per answerable question of each conversation, with the candidates of ``retrieve(k)``
    (``CandidateGroup.to_dict()`` each: the ranker's fields)."""
    groups: list[dict[str, Any]] = []
    for mem, user, conv, qa, evidence, asked_at in asked_questions(make_memory, convs, source, categories, show_progress):
        cands = mem.retrieve(qa.question, user, k=k, now=asked_at).candidates
        if not cands:
            continue
        groups.append(CandidateGroup(
            query=qa.question, texts=[candidate_text(h) for h in cands],  # what a cross-encoder reads
            features=candidate_features(qa.question, cands).tolist(),
            labels=[int(bool(evidence & set(h.item.provenance))) for h in cands],
            provenance=[list(h.item.provenance) for h in cands],
            tokens=[h.item.n_tokens for h in cands], evidence=sorted(evidence),
            source=source, conversation=conv.conv_id, category=qa.category,
        ).to_dict())
    return groups


def _without(node: Any, name: str) -> Any:
    """``node`` with every ``name`` key removed, at any depth (a split encoder nests two encoder nodes)."""
    if isinstance(node, dict):
        return {k: _without(v, name) for k, v in node.items() if k != name}
    return node


def groups_key(cfg: Any, embedder_name: str) -> str:
    """The cache folder name of the groups ``cfg`` mines: a hash of everything that shapes them (pipeline, data,
    splits, embedder, the feature code), less the machine's adapter path and the engine's ``PACKING_SETTINGS``."""
    from lightmem.config import to_container
    from lightmem.retrieval import features

    key = {name: to_container(cfg[name]) for name in ("encoder", "store", "retrieval", "controller", "writer", "sensory", "ltm",
                                                      "memory", "llm")}
    key["encoder"] = _without(key["encoder"], "adapter")  # a machine's path; the embedder's name carries its fingerprint
    for name in PACKING_SETTINGS:  # they act on Stage 2's order, after the candidates a group holds
        key["retrieval"].pop(name, None)
    key.update(embedder=embedder_name, k=cfg.k, data=[Path(str(p)).name for p in (cfg.locomo_path, cfg.lme_path)],
               splits=[str(cfg.locomo_train), str(cfg.locomo_test), cfg.lme_max],
               features=hashlib.sha256(Path(features.__file__).read_bytes()).hexdigest(),  # the feature code itself
               group_format=3)  # 2: groups carry the query and candidate texts; 3: each text embedded alone (int8)
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def mined_groups(cfg: Any, scratch: Path, mine: bool = True) -> tuple[dict[str, list[dict[str, Any]]], Path, bool]:
    """``({"train", "test_locomo", "test_longmemeval"}: groups), cache folder, whether it came from the cache``.

    Mining (ingest + Stage 1 for every question, in stores under ``scratch``) is the slow part and does not
    depend on what is fitted on the groups: they are cached under ``cfg.cache_dir``, keyed by everything that
    does shape them (pipeline, data, splits, embedder, the feature code). ``train/ranker.py`` and
    ``train/slm.py`` share them.

    Raises:
        FileNotFoundError: ``mine`` is False and the groups are not in the cache.
    """
    from lightmem.config import SharedRuntime, build_embedder, build_memory
    from lightmem.datasets import load_locomo, select_conversations
    from lightmem.datasets.longmemeval import load_longmemeval
    from lightmem.datasets.splits import split_of

    embedder, shared = build_embedder(cfg), SharedRuntime(cfg)
    cache = Path(cfg.cache_dir) / groups_key(cfg, embedder.name)
    if (cache / "groups.json").exists():
        return json.loads((cache / "groups.json").read_text()), cache, True
    if not mine:
        raise FileNotFoundError(f"the mined groups are not in {cache}: mine them in one process first "
                                "(`python train/ranker.py` with the same settings), then start the multi-process run")
    shutil.rmtree(scratch, ignore_errors=True)

    def make_memory(conv_id: str) -> Memory:
        return build_memory(cfg, scratch / conv_id, embedder=embedder, shared=shared)

    locomo = load_locomo(cfg.locomo_path)
    lme = load_longmemeval(cfg.lme_path)[: cfg.lme_max]
    progress = sys.stderr.isatty()
    mine = lambda convs, source, cats=None: mine_groups(make_memory, convs, source, cfg.k, cats, progress)  # noqa: E731
    groups = {"train": mine(select_conversations(locomo, cfg.locomo_train), "locomo", (1, 2, 3, 4))
              + mine([c for c in lme if split_of(c.conv_id) == "train"], "longmemeval"),
              "test_locomo": mine(select_conversations(locomo, cfg.locomo_test), "locomo", (1, 2, 3, 4)),
              "test_longmemeval": mine([c for c in lme if split_of(c.conv_id) == "test"], "longmemeval")}
    shutil.rmtree(scratch, ignore_errors=True)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = cache / f"groups.json.{os.getpid()}.tmp"  # parallel sweep trials may mine the same groups at once
    tmp.write_text(json.dumps(groups))
    tmp.replace(cache / "groups.json")  # a kill mid-write leaves no half cache
    return groups, cache, False


def _padded(groups: Sequence[dict[str, Any]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n = max(len(g["labels"]) for g in groups)
    x = torch.zeros(len(groups), n, len(FEATURES), dtype=torch.float64)
    y = torch.zeros(len(groups), n, dtype=torch.float64)
    mask = torch.zeros(len(groups), n, dtype=torch.bool)
    for i, g in enumerate(groups):
        m = len(g["labels"])
        x[i, :m] = torch.tensor(g["features"], dtype=torch.float64)
        y[i, :m] = torch.tensor(g["labels"], dtype=torch.float64)
        mask[i, :m] = True
    return x, y, mask


def fit_linear(groups: Sequence[dict[str, Any]], loss: str = "both", l2: float = 1e-3, listwise_weight: float = 1.0,
               max_iter: int = 200) -> dict[str, Any]:
    """Standardise the features and fit weights by L-BFGS on the ranking loss (+ L2); deterministic."""
    if not groups:
        raise ValueError("no ranker groups: check the data paths and splits")
    x, y, mask = _padded(groups)
    flat = x[mask]
    mean, scale = flat.mean(0), flat.std(0).clamp(min=1e-6)
    z = (x - mean) / scale
    w = torch.zeros(len(FEATURES), dtype=torch.float64, requires_grad=True)
    b = torch.zeros((), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=max_iter, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        logits = z @ w + b
        value = ranking_loss(loss, logits, y, mask, listwise_weight) + l2 * (w * w).sum()
        value.backward()
        return value

    opt.step(closure)
    return {"features": list(FEATURES), "mean": mean.tolist(), "scale": scale.tolist(), "coef": w.detach().tolist(),
            "intercept": float(b.detach()), "loss": loss, "l2": l2}


def holds_evidence(group: dict[str, Any], idx: Sequence[int]) -> float:
    """1.0 when the candidates ``idx`` of ``group`` hold every evidence turn."""
    return float(set(group["evidence"]) <= {p for i in idx for p in group["provenance"][i]})


def ranker_order(group: dict[str, Any], score: Callable[[np.ndarray], np.ndarray]) -> tuple[np.ndarray, list[int]]:
    """The ranker's logits of a group's candidates and their order (best first, ties by Stage 1); ``score`` is
    the model's ``ranker_scorer``, built once for all the groups."""
    s = score(np.asarray(group["features"]))
    return s, sorted(range(len(s)), key=lambda i: (-s[i], i))


def fit_trees(groups: Sequence[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    """Boosted trees over the candidates' features (scikit-learn's ``HistGradientBoostingClassifier``, pointwise:
    evidence or not), seeded, as ``ranker.json`` stores them (``retrieval/trees.py``). Measured on cross-validation
    folds of the training groups, they learn what a single linear model cannot fit to both LoCoMo and LongMemEval at once
    (docs/results/locomo.md)."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    from lightmem.retrieval.trees import from_sklearn

    if not groups:
        raise ValueError("no ranker groups: check the data paths and splits")
    x = np.concatenate([np.asarray(g["features"], dtype=np.float64) for g in groups])
    y = np.concatenate([np.asarray(g["labels"]) for g in groups])
    model = HistGradientBoostingClassifier(random_state=0, **params).fit(x, y)
    return {"features": list(FEATURES), "kind": "trees", **from_sklearn(model), "params": dict(params)}


def evaluate(groups: Sequence[dict[str, Any]], weights: dict[str, Any] | None, k: int, budget: int,
             fill: bool = True, packing: ServedPacking | None = None) -> dict[str, float]:
    """recall_all@K and within ``budget`` tokens of the ranker's order (``weights=None``: the Stage-1 order)."""
    score = None if weights is None else ranker_scorer(weights)
    orders = [list(range(len(g["labels"]))) if score is None else ranker_order(g, score)[1] for g in groups]
    return evaluate_orders(groups, orders, k, budget, fill, packing=packing)


def where_lost(groups: Sequence[dict[str, Any]], weights: dict[str, Any], budget: int) -> dict[str, dict[str, Any]]:
    """Per category: questions, those with every evidence turn among the candidates (``in_pool``), those packed
    whole within ``budget`` tokens in the ranker's order (``packed``), and for the rest of ``in_pool`` the rank
    of their worst-placed evidence memory (``missed_ranks``); ``list_questions``/``list_in_pool``: those with
    three or more evidence turns."""
    out: dict[str, dict[str, Any]] = {}
    score = ranker_scorer(weights)
    for g in groups:
        _, order = ranker_order(g, score)
        evidence = set(g["evidence"])
        rank: dict[str, int] = {}
        for r, i in enumerate(order):
            for p in g["provenance"][i]:
                if p in evidence:
                    rank.setdefault(p, r)
        row = out.setdefault(f"category_{g['category']}", {"n": 0, "in_pool": 0, "packed": 0, "missed_ranks": [],
                                                           "list_questions": 0, "list_in_pool": 0})
        in_pool = len(rank) == len(evidence)
        row["n"] += 1
        row["in_pool"] += in_pool
        if len(evidence) >= 3:
            row["list_questions"] += 1
            row["list_in_pool"] += in_pool
        if in_pool:
            kept = len(pack_by_budget([g["tokens"][i] for i in order], budget))
            worst = max(rank.values())
            if worst < kept:
                row["packed"] += 1
            else:
                row["missed_ranks"].append(worst)
    for row in out.values():
        row["missed_ranks"].sort()
    return dict(sorted(out.items()))


class ServedPacking:
    """Scores a group's ranked candidates as the harness scores a ``build_context`` prompt (strict recall): the
    budget is the whole prompt, counted with ``counter`` (the reader's tokenizer, as ``memory.tokenizer`` sets it),
    of which the question's block is taken first (``ContextComposer.layout``); the candidates are packed as the
    engine packs them (``retrieval.engine.pack_items``: whole memories in the first ``whole_share`` of what is
    left, then one-sentence excerpts), each memory's line and its day's date line counted as the composer renders
    them (``group_dates``). Only a memory packed whole counts for recall; an excerpt takes room and earns nothing.
    ``anchor_dates`` is the engine's policy (``retrieval.anchoring``): for a question it applies to, relative dates
    are resolved from the candidate's date first. With a ``word_scorer`` (the write path's, ``memory.word_scores``)
    and ``excerpt_rate`` < 1, excerpts are squeezed as the engine squeezes them: each candidate's words are scored
    once, as the write path scores a new memory."""

    def __init__(self, counter: Any, whole_share: float, anchor_dates: str = "asked", excerpt_rate: float = 1.0,
                 word_scorer: Any = None, group_dates: bool = True) -> None:
        from lightmem.retrieval.composer import ContextComposer

        if not 0.0 <= whole_share <= 1.0:
            raise ValueError(f"whole_share must be in [0, 1], got {whole_share!r}")
        if not 0.0 < excerpt_rate <= 1.0:
            raise ValueError(f"excerpt_rate must be in (0, 1], got {excerpt_rate!r}")
        self.whole_share, self.anchor_dates = float(whole_share), check_policy(anchor_dates)
        self.excerpt_rate, self.word_scorer = float(excerpt_rate), word_scorer
        self.composer = ContextComposer(counter, group_dates=group_dates)
        self._count = CachedCount(lambda: counter, max_size=1 << 20)
        self._codes: dict[str, str] = {}  # memory text -> its keep code (models.word_scorer.encode_keep)

    def _score(self, texts: Sequence[str]) -> None:
        """Score the words of the memory texts not scored yet (one batch)."""
        from lightmem.models.word_scorer import keep_codes

        todo = [t for t in dict.fromkeys(texts) if t not in self._codes]
        self._codes.update(zip(todo, keep_codes(self.word_scorer, todo)))

    def items(self, group: dict[str, Any], pool: Sequence[int]) -> list[Any]:
        """The candidates of ``pool`` as the memories the engine packs for the group's question: as written (with
        their words' keep codes when excerpts are squeezed), then dated as the engine dates them (``dated_item``)
        for a question the anchoring policy applies to."""
        from lightmem.retrieval.engine import dated_item
        from lightmem.types import MemoryItem

        date = wants_dates(self.anchor_dates, group["query"])
        written = {i: split_dated(group["texts"][i]) for i in pool}  # (day, text) of each candidate
        squeezing = self.word_scorer is not None and self.excerpt_rate < 1.0
        if squeezing:  # scored as written; the scores follow the dates written in, as in the engine
            self._score([text for _, text in written.values()])
        out = []
        for i in pool:
            day, text = written[i]
            when = parse_timestamp(day) if day else 0.0
            item = MemoryItem(id=str(i), user_id="", text=text, provenance=list(group["provenance"][i]), created_at=when,
                              event_time=when, last_access=when, metadata={"keep": self._codes[text]} if squeezing else {})
            out.append(dated_item(item, self._count) if date and day else item)
        return out

    def kept(self, group: dict[str, Any], pool: Sequence[int], budget: int) -> list[int]:
        """The candidates of ``pool`` (rank order) whose whole text reaches a ``budget``-token prompt for the group's
        question (strict: excerpts left out)."""
        from lightmem.retrieval.engine import pack_items

        memory_budget = self.composer.layout(group["query"], (), budget).memory_budget
        packed = pack_items(self.composer, self.items(group, pool), [group["query"]], memory_budget, self.whole_share,
                            self.excerpt_rate, self._count)  # the engine's queries: the question and its one HQ
        return [pool[j] for j, cut in packed if cut is None]


def served_packing(cfg: Any) -> ServedPacking:
    """``ServedPacking`` of the pipeline a run's config serves: the prompt's tokenizer (``memory.tokenizer``), its
    date lines (``memory.group_dates``), its retrieval packing settings and, with ``memory.word_scores``, the write
    path's word scorer (the trained compressor)."""
    from lightmem.config import build_embedder
    from lightmem.models.prompt_tokens import prompt_counter
    from lightmem.models.word_scorer import default_word_scorer

    scorer = default_word_scorer() if cfg.memory.word_scores else None
    tokenizer = cfg.memory.get("tokenizer")
    counter = prompt_counter(tokenizer, build_embedder(cfg) if tokenizer == "embedder" else None)
    return ServedPacking(counter, cfg.retrieval.whole_share, cfg.retrieval.anchor_dates, cfg.retrieval.excerpt_rate,
                         scorer, group_dates=bool(cfg.memory.get("group_dates", True)))


def evaluate_orders(groups: Sequence[dict[str, Any]], orders: Sequence[Sequence[int]], k: int, budget: int,
                    fill: bool = True, per_group: list[float] | None = None,
                    packing: ServedPacking | None = None) -> dict[str, float]:
    """recall_all@K and within ``budget`` tokens (packed as the composer packs), overall and per category,
    of one candidate order per group. ``fill`` packs the budget from every ranked candidate, as the
    engine does by default (``fill_budget``); otherwise from the best K only. ``per_group`` (a list)
    receives each group's 0/1 recall within the budget, for paired comparisons. ``packing``: strict recall of
    the prompt the engine and composer build (``ServedPacking``); None: whole memories by their text's tokens alone."""
    per: dict[str, list[tuple[float, float]]] = {}
    for g, order in zip(groups, orders):
        top = list(order[:k])
        pool = list(order) if fill else top
        if packing is not None:
            kept = packing.kept(g, pool, budget)
        else:
            kept = [pool[i] for i in pack_by_budget([g["tokens"][i] for i in pool], budget)]
        scores = tuple(holds_evidence(g, idx) for idx in (top, kept))
        if per_group is not None:
            per_group.append(scores[1])
        for key in ("overall", f"category_{g['category']}"):
            per.setdefault(key, []).append(scores)
    out: dict[str, float] = {}
    for key, vals in sorted(per.items()):
        out[f"{key}/recall_all@{k}"] = float(np.mean([a for a, _ in vals]))
        out[f"{key}/recall_all@budget"] = float(np.mean([b for _, b in vals]))
    out["n"] = float(len(groups))
    return out


# What a ranker's card says of each model kind (``cfg.model``): its task, what serves it, the command that makes it.
MODEL_CARDS = {
    "linear": ("linear listwise ranker of Stage-1 candidates",
               "conf/selector/experimental/ranker_linear.yaml; SLM-2 is stacked on it", "make train  (python train/ranker.py)"),
    "trees": ("boosted trees ({n_trees}) ranking Stage-1 candidates", "conf/selector/ranker.yaml, the default Stage 2",
              "make train  (python train/ranker.py model=trees)"),
}


def train_ranker(cfg: Any) -> dict[str, Any]:
    """``train/ranker.py``'s run: mine (or reuse) the groups, fit the ranker, score it and the Stage-1 order
    on the held-out groups (with ``where_lost``), write ``out_dir/best/ranker.json`` and finish as every
    trainer does (``job.finish_run``: card and export when ``cfg.export_dir`` is set).

    Raises:
        SingleProcessOnly: Started by torchrun or accelerate launch with more than one process: neither model is fitted
            by a data-parallel loop (the trees by scikit-learn, the linear ranker by full-batch L-BFGS).
    """
    import time

    from lightmem.config import make_run_logger, to_container
    from lightmem.datasets.catalog import repo_root
    from lightmem.training.distributed import single_process_only
    from lightmem.training.job import finish_run

    single_process_only("train/ranker.py", f"model={cfg.model} is fitted in one step on the mined groups, not by the "
                                           "data-parallel training loop")
    t0 = time.perf_counter()
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = json.loads(json.dumps(to_container(cfg)).replace(str(repo_root()) + "/", ""))  # no machine paths
    logger = make_run_logger(cfg.logger, out, "train-ranker")
    logger.log_config(config)
    groups, cache, cached = mined_groups(cfg, out / "stores")
    train = groups["train"]
    test = {"locomo": groups["test_locomo"], "longmemeval": groups["test_longmemeval"]}
    mined_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    if cfg.model not in MODEL_CARDS:
        raise ValueError(f"model must be one of {sorted(MODEL_CARDS)}, got {cfg.model!r}")
    weights = fit_trees(train, to_container(cfg.trees)) if cfg.model == "trees" else \
        fit_linear(train, cfg.loss, cfg.l2, cfg.listwise_weight)
    fit_s = time.perf_counter() - t1
    # Held out: packing whole memories by their text's tokens alone (``{name}/``), and strict recall of the prompt
    # build_context composes (``{name}_served/``: the whole prompt counted with the reader's tokenizer, dates and
    # question included, as eval/locomo.py scores it; excerpts earn nothing).
    packing = served_packing(cfg)
    metrics: dict[str, float] = {}
    for source, held_out in test.items():
        for name, w in (("stage1", None), ("ranker", weights)):
            metrics.update({f"test/{source}/{name}/{k}": v for k, v in evaluate(held_out, w, cfg.k, cfg.budget).items()})
            metrics.update({f"test/{source}/{name}_served/{k}": v
                            for k, v in evaluate(held_out, w, cfg.k, cfg.budget, packing=packing).items()})
    logger.log_metrics(metrics)
    lost = {source: where_lost(held_out, weights, cfg.budget) for source, held_out in test.items()}
    groups_file = out / "ranker_groups.jsonl"
    groups_file.write_text("".join(json.dumps(g) + "\n" for g in train))
    trees = weights.get("trees", [])
    n_params = sum(len(t["value"]) for t in trees) if trees else len(weights["coef"]) + 1
    task, served_by, command = MODEL_CARDS[cfg.model]
    card = {"name": "lightmem learned ranker (Stage 2)", "task": task.format(n_trees=len(trees)),
            "description": "Scores each Stage-1 candidate from cheap features (lightmem/retrieval/features.py); "
                           f"LearnedRanker loads it ({served_by}).",
            "base_model": f"features over the Stage-1 signals of {cfg.encoder.get('model')} "
                          f"(adapter: {'yes' if cfg.encoder.get('adapter') else 'no'})",
            "command": command}
    training = {"n_train_groups": len(train), "mine_seconds": round(mined_s, 1),
                "groups_from_cache": str(cache) if cached else None, "fit_seconds": round(fit_s, 2)}
    summary = {"weights": weights, "test": metrics, "where_lost": lost,
               "card": {**card, "params": {"trainable": n_params, "total": n_params}, "training": training}}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    (out / "best").mkdir(exist_ok=True)
    (out / "best" / "ranker.json").write_text(json.dumps(weights, indent=2))
    finish_run(out, cfg.export_dir, card, params={"trainable": n_params, "total": n_params}, data_files=[groups_file],
               metrics=metrics, training=training, config=config, logger=logger)
    return summary
