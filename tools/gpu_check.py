"""The CUDA paths, checked and timed on one GPU (writes numbers; a failed check exits non-zero).

    python tools/gpu_check.py                       # every check, the packaged models
    python tools/gpu_check.py --only encoder,reader --out outputs/gpu_check.json

Checks, each reported on its own (one failing does not stop the others):
  encoder   the document encoders (MiniLM, mpnet) on the torch backend on CUDA: the vectors match the CPU's,
            and documents per second on LoCoMo turns at the serving settings (128 tokens)
  train     the LoRA trainers (cross-encoder selector, embedder) for --steps optimizer steps on CUDA, from a
            small synthetic set made here: steps per second
  reader    a Qwen2.5-Coder reader through transformers on CUDA (bf16): seconds per question on ~1,000-token
            prompts, 32 new tokens each (greedy, one question at a time and in batches of 8)
  slm_lora  one LoRA optimizer step of a Qwen2.5-Coder model on CUDA (batch 8 x 512 tokens): steps per second,
            what fine-tuning SLM-1 or SLM-3 would cost
  faiss     the FAISS GPU index against the CPU one (needs faiss-gpu-cu12: pip install 'lightmem-slm[gpu]')

--reader-models names transformers folders (or packaged names) for the reader and slm_lora checks; a folder of
random weights with the real shapes times the same as the real model (what the check reports is speed, not
answers).
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHECKS = ("encoder", "train", "reader", "slm_lora", "faiss")


def _turns(n: int) -> list[str]:
    from lightmem.datasets.loading import load_conversations

    convs = load_conversations(ROOT / "data" / "locomo" / "locomo_dev.json.gz")
    texts = [f"{t.speaker}: {t.text}" for c in convs for t in c.turns]
    return (texts * (n // max(len(texts), 1) + 1))[:n]


DEVICE = "cuda"


def _sync() -> None:
    import torch

    if DEVICE.startswith("cuda"):
        torch.cuda.synchronize()


def check_encoder(args) -> dict:
    import numpy as np

    from lightmem.models.embedder import SentenceTransformerEmbedder

    texts = _turns(args.docs)
    out = {}
    for model in args.encoders:
        gpu = SentenceTransformerEmbedder(model, device=DEVICE, backend="torch", max_seq_length=128, batch_size=128,
                                          query_cache_size=0)
        cpu = SentenceTransformerEmbedder(model, device="cpu", backend="torch", max_seq_length=128, query_cache_size=0)
        a, b = np.asarray(gpu.encode(texts[:64])), np.asarray(cpu.encode(texts[:64]))
        cos = float(np.min(np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))))
        gpu.encode(texts[:512])  # warm-up
        _sync()
        t0 = time.perf_counter()
        gpu.encode(texts)
        _sync()
        seconds = time.perf_counter() - t0
        out[Path(model).name] = {"docs": len(texts), "docs_per_s": round(len(texts) / seconds, 1),
                                 "min_cosine_gpu_vs_cpu": round(cos, 5), "ok": cos > 0.999}
    return out


def check_train(args) -> dict:
    from hydra import compose, initialize_config_dir

    from data_gen import distill as distill_script
    from data_gen import synth as synth_script
    from lightmem.evaluation.runs.entry import register_configs as register_evaluation
    from lightmem.training.schemas import register_configs as register_training
    from train import cross_encoder as selector_script
    from train import embedder as embedder_script

    register_evaluation()
    register_training()
    work = Path(args.work) / "train"
    data = work / "data"
    out = {}
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        # the training set is small and quick to make (the check times the optimizer steps, not the data)
        synth_script.run(compose("synth", [f"out_dir={data}/synth", "n_samples=400", "queries_per_user=8", "seed=1"]))
        distill_script.run(compose("distill", [f"out_dir={data}", f"synth_dir={data}/synth", "encoder=hashing",
                                               f"locomo_path={ROOT / 'tests/fixtures/tiny_locomo.json'}",
                                               "lme_max=12", "locomo_train=0", "locomo_test=1"]))
        common = [f"optim.max_steps={args.steps}", f"optim.eval_every={args.steps * 10}", f"optim.cpu={str(DEVICE == 'cpu').lower()}",
                  f"data_dir={data}", "max_eval_groups=8"]
        for name, script, config in (("selector", selector_script, "train_cross_encoder"),
                                     ("embedder", embedder_script, "train_embedder")):
            result = script.run(compose(config, common + [f"out_dir={work}/run_{name}", f"export_dir={work}/ck_{name}"]))
            train = result["train"]
            out[name] = {"steps": train["steps"], "seconds": round(train["seconds"], 2),
                         "steps_per_s": round(train["steps"] / max(train["seconds"], 1e-9), 2),
                         "exported": (work / f"ck_{name}" / "adapter_model.safetensors").exists()}
            out[name]["ok"] = out[name]["steps"] == args.steps and out[name]["exported"]
    return out


def _prompts(tok, n: int, tokens: int) -> list[str]:
    texts = _turns(4000)
    prompts, i = [], 0
    for _ in range(n):
        lines = []
        while len(tok("\n".join(lines))["input_ids"]) < tokens:
            lines.append(f"- {texts[i % len(texts)]}")
            i += 1
        prompts.append("Memories:\n" + "\n".join(lines) + "\nQuestion: When did they last meet?\nShort answer:")
    return prompts


def check_reader(args) -> dict:
    from lightmem.llm.transformers_backend import TransformersLLM

    out = {}
    for model in args.reader_models:
        llm = TransformersLLM(model, device=DEVICE, max_new_tokens=32, batch_size=1)
        prompts = _prompts(llm.tok, args.questions, 1000)
        llm.generate(prompts[:2])  # warm-up
        _sync()
        t0 = time.perf_counter()
        llm.generate(prompts)
        _sync()
        one = (time.perf_counter() - t0) / len(prompts)
        llm.batch_size = 8
        llm.generate(prompts[:8])
        _sync()
        t0 = time.perf_counter()
        llm.generate(prompts)
        _sync()
        batched = (time.perf_counter() - t0) / len(prompts)
        out[Path(model).name] = {"s_per_question": round(one, 3), "s_per_question_batch8": round(batched, 3),
                                 "prompt_tokens": len(llm.tok(prompts[0])["input_ids"]), "new_tokens": 32, "ok": True}
    return out


def check_slm_lora(args) -> dict:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from lightmem.models.registry import ModelRegistry

    out = {}
    for model in args.reader_models:
        path = ModelRegistry().causal_lm_path(model)
        lm = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.bfloat16).to(DEVICE)
        lm.gradient_checkpointing_enable()
        lm = get_peft_model(lm, LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                                           task_type="CAUSAL_LM"))
        opt = torch.optim.AdamW([p for p in lm.parameters() if p.requires_grad], lr=1e-4)
        ids = torch.randint(0, lm.config.vocab_size, (8, 512), device=DEVICE)
        losses = []
        for step in range(args.steps + 2):
            if step == 2:  # two warm-up steps
                _sync()
                t0 = time.perf_counter()
            loss = lm(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(float(loss.detach()))
        _sync()
        seconds = time.perf_counter() - t0
        out[Path(model).name] = {"steps": args.steps, "steps_per_s": round(args.steps / seconds, 2),
                                 "tokens_per_s": round(args.steps * 8 * 512 / seconds), "loss_first_last":
                                 [round(losses[0], 3), round(losses[-1], 3)], "ok": losses[-1] < losses[0],
                                 "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if DEVICE != "cpu" else None}
        del lm, opt
    return out


def check_faiss(args) -> dict:
    import numpy as np

    from lightmem.stores.views.vector import VectorIndex

    rng = np.random.default_rng(0)
    x = rng.normal(size=(10000, 768)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    cpu, gpu = VectorIndex(768), VectorIndex(768, device="cuda")
    cpu.add(np.arange(len(x)), x)
    gpu.add(np.arange(len(x)), x)
    same = all(cpu.search(x[i], 10)[0].tolist() == gpu.search(x[i], 10)[0].tolist() for i in range(100))
    return {"items": len(x), "same_top10_on_100_queries": same, "ok": same}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--only", default=",".join(CHECKS), help=f"comma-separated checks among {', '.join(CHECKS)}")
    parser.add_argument("--encoders", nargs="+", default=["all-MiniLM-L6-v2", "all-mpnet-base-v2"])
    parser.add_argument("--reader-models", nargs="+", default=["Qwen2.5-Coder-0.5B-Instruct"])
    parser.add_argument("--docs", type=int, default=20000, help="documents timed per encoder")
    parser.add_argument("--questions", type=int, default=16, help="reader prompts timed per model")
    parser.add_argument("--steps", type=int, default=50, help="optimizer steps timed per trainer")
    parser.add_argument("--device", default="cuda", help="cuda[:N], or cpu to try the checks' own code on a CPU")
    parser.add_argument("--work", default="outputs/gpu_check", help="scratch folder (training data and runs)")
    parser.add_argument("--out", default="outputs/gpu_check.json")
    args = parser.parse_args(argv)
    import torch

    global DEVICE
    DEVICE = args.device
    if DEVICE.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_check: torch sees no CUDA device", file=sys.stderr)
        return 2
    report = {"device": torch.cuda.get_device_name(0) if DEVICE != "cpu" else platform.processor() or "cpu", "torch": torch.__version__, "python": platform.python_version(),
              "checks": {}}
    failed = []
    for name in [c.strip() for c in args.only.split(",") if c.strip()]:
        if name not in CHECKS:
            parser.error(f"unknown check {name!r}; choose among {', '.join(CHECKS)}")
        t0 = time.perf_counter()
        try:
            result = globals()[f"check_{name}"](args)
            ok = all(v.get("ok", True) for v in result.values() if isinstance(v, dict)) and result.get("ok", True)
        except Exception as exc:  # noqa: BLE001 - each check is reported on its own
            result, ok = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-3000:]}, False
        result["seconds"] = round(time.perf_counter() - t0, 1)
        report["checks"][name] = result
        print(f"[{'ok' if ok else 'FAILED'}] {name}: {json.dumps({k: v for k, v in result.items() if k != 'trace'})}",
              flush=True)
        if not ok:
            failed.append(name)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out}; failed: {', '.join(failed) or 'none'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
