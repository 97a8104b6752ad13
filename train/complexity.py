"""Train the query-complexity classifier (LOW/HIGH; C_q = P(HIGH)) with LoRA on MiniLM.

    python train/complexity.py
    python train/complexity.py -m lora.r=4,8 optim.lr=5e-4,1e-3
"""
from __future__ import annotations

import json
from pathlib import Path

import hydra
from omegaconf import DictConfig

from lightmem.config import per_job, to_container
from lightmem.metric_logger import quiet_third_party_logs
from lightmem.models.registry import ModelRegistry
from lightmem.roles.complexity import TrainedComplexity
from lightmem.seeding import seed_everything
from lightmem.training import classify
from lightmem.training.job import read_jsonl, train_and_export
from lightmem.training.schemas import lora_spec, register_configs, train_spec


def run(cfg: DictConfig) -> dict:
    quiet_third_party_logs()
    seed_everything(cfg.optim.seed)  # before the model is built: heads and LoRA matrices are drawn then
    data = Path(cfg.data_dir)
    sources = set(cfg.sources)
    train, val = ([r for r in read_jsonl(data / f"complexity_{s}.jsonl") if r["source"] in sources] for s in ("train", "val"))
    test = read_jsonl(data / "complexity_test.jsonl")  # every source, trained on or not
    if not train or not val:
        raise ValueError(f"sources={sorted(sources)} leave no {'training' if not train else 'validation'} rows in {data}/complexity_*.jsonl "
                         "(LoCoMo has no validation split: add longmemeval or synth)")
    model, tok = classify.build_classifier(str(ModelRegistry().path(cfg.base_model)), lora_spec(cfg.lora), "sequence")

    def evaluate(m):
        return classify.evaluate_sequence(TrainedComplexity.from_objects(m, tok, cfg.max_length).probabilities, val)

    def held_out(best: Path) -> dict[str, float]:
        clf = TrainedComplexity(str(best), cfg.base_model, cfg.max_length, device="cpu" if cfg.optim.cpu else "auto")
        texts = sorted({r["text"] for r in test})
        p_high = {t: p for i in range(0, len(texts), 64) for t, p in zip(texts[i : i + 64], clf.probabilities(texts[i : i + 64]))}
        scored = lambda qs: [p_high[q] for q in qs]  # noqa: E731 - each question read once, for its source and its type
        out = {}
        for source in sorted({r["source"] for r in test}):
            rows = [r for r in test if r["source"] == source]
            out.update({f"test/{source}/{k}": v for k, v in classify.evaluate_sequence(scored, rows).items()})
            for qtype in sorted({r.get("type", "") for r in rows} - {""}):  # accuracy within each question type
                of_type = [r for r in rows if r.get("type") == qtype]
                m = classify.evaluate_sequence(scored, of_type)
                out.update({f"test/{source}/type/{qtype}/{k}": m[k] for k in ("accuracy", "majority", "n")})
        return out

    weights = classify.class_weights([r["label"] for r in train]) if cfg.balance else None
    summary = train_and_export(
        name="complexity", model=model, train=train, make_batch=classify.sequence_batcher(tok, cfg.max_length),
        loss_fn=classify.weighted_ce(weights), evaluate=evaluate, test=held_out, metric=cfg.metric,
        spec=train_spec(cfg.optim), out_dir=cfg.out_dir, export_dir=cfg.export_dir, logger_cfg=cfg.logger,
        config=to_container(cfg), data_files=[data / "complexity_train.jsonl"],
        card={"name": "lightmem query-complexity classifier", "task": "sequence classification LOW/HIGH",
              "description": "C_q = P(HIGH): the question needs two or more evidence units (SimpleMem's adaptive depth); "
                                 "TrainedComplexity loads it.",
              "base_model": cfg.base_model, "command": "make train  (python train/complexity.py)"},
    )
    print(json.dumps(summary["test"], indent=1))
    return summary


@hydra.main(version_base="1.3", config_path="../conf", config_name="train_complexity")
def main(cfg: DictConfig) -> float:
    cfg = per_job(cfg)  # a sweep's jobs neither share state nor overwrite checkpoints/
    return run(cfg)["train"]["best"].get(cfg.metric, float("nan"))


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
