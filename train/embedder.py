"""Train the memory embedder (LoRA on a bi-encoder, all-mpnet-base-v2 by default); export the best adapter and its model card.

    python train/embedder.py
    python train/embedder.py -m lora.r=8,16 optim.lr=5e-4,1e-3
"""
from __future__ import annotations

import json
from pathlib import Path

import hydra
from omegaconf import DictConfig

from lightmem.config import per_job, to_container
from lightmem.metric_logger import quiet_third_party_logs
from lightmem.seeding import seed_everything
from lightmem.training import embedder as emb
from lightmem.training import selector as sel
from lightmem.training.job import read_jsonl, train_and_export
from lightmem.training.schemas import lora_spec, register_configs, train_spec


def run(cfg: DictConfig) -> dict:
    quiet_third_party_logs()
    seed_everything(cfg.optim.seed)  # before the model is built: LoRA matrices are drawn then
    data = Path(cfg.data_dir)
    task, spec = emb.EmbedderTask(**to_container(cfg.task)), train_spec(cfg.optim)
    sources = set(cfg.sources)
    usable = lambda g: any(g["labels"]) and not all(g["labels"])  # noqa: E731 - a positive and a hard negative
    train = [g for g in read_jsonl(data / "selector_train.jsonl") if g["source"] in sources and usable(g)]
    train = train[: cfg.max_train_groups] if cfg.max_train_groups else train
    val = [g for g in read_jsonl(data / "selector_val.jsonl") if g["source"] in sources][: cfg.max_eval_groups]
    test = read_jsonl(data / "selector_test.jsonl")
    from lightmem.models.registry import ModelRegistry

    model, tok = emb.build_bi_encoder(str(ModelRegistry().embedder_path(cfg.base_model)), lora_spec(cfg.lora))

    def held_out(best: Path) -> dict[str, float]:
        """Stage-1 order versus the cosine of the exported embedder, as the store would load it, per source."""
        from lightmem.models.embedder import SentenceTransformerEmbedder

        tuned = SentenceTransformerEmbedder(cfg.base_model, adapter=str(best), device="cpu" if spec.cpu else "auto",
                                            query_cache_size=0)
        base = SentenceTransformerEmbedder(cfg.base_model, device="cpu" if spec.cpu else "auto", query_cache_size=0)

        def scorer(e):
            def score(queries: list[str], texts: list[str]) -> list[float]:
                q = e.encode(queries[:1], is_query=True)[0]
                return (e.encode([emb.doc_text(t) for t in texts]) @ q).tolist()
            return score

        out: dict[str, float] = {}
        for source in sorted({g["source"] for g in test}):
            groups = [g for g in test if g["source"] == source]
            for name, fn in (("stage1", None), ("base_cosine", scorer(base)), ("tuned_cosine", scorer(tuned))):
                out.update({f"test/{source}/{name}/{k}": v for k, v in sel.evaluate_groups(fn, groups, task.k).items()})
        return out

    summary = train_and_export(
        name="embedder", model=model, train=train, make_batch=emb.batcher(task), loss_fn=emb.contrastive_loss(tok, task),
        evaluate=lambda m: sel.evaluate_groups(emb.cosine_scorer(m, tok, task.max_length), val, task.k), test=held_out,
        metric=cfg.metric, spec=spec, out_dir=cfg.out_dir, export_dir=cfg.export_dir, logger_cfg=cfg.logger,
        config=to_container(cfg), data_files=[data / "selector_train.jsonl"],
        card={"name": "lightmem memory embedder", "task": "bi-encoder for Stage-1 retrieval (question -> memory turn)",
              "description": f"A LoRA adapter merged into {cfg.base_model} at load; SentenceTransformerEmbedder(adapter=...) "
                             "loads it (conf/encoder/minilm_tuned.yaml). Stores record the embedder's name, so a store "
                             "written with the base model is never searched with the tuned one.",
              "base_model": cfg.base_model, "command": "make train  (python train/embedder.py)"},
    )
    print(json.dumps({k: v for k, v in summary["test"].items() if "recall_all" in k}, indent=1))
    return summary


@hydra.main(version_base="1.3", config_path="../conf", config_name="train_embedder")
def main(cfg: DictConfig) -> float:
    cfg = per_job(cfg)  # a sweep's jobs neither share state nor overwrite checkpoints/
    return run(cfg)["train"]["best"].get(cfg.metric, float("nan"))  # what a sweep maximises


if __name__ == "__main__":
    register_configs()  # the schemas and resolvers conf/ needs, before Hydra composes
    main()
