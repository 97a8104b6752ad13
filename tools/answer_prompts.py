"""Answer recorded reader prompts (``llm=record``) with a GGUF reader through transformers, on a GPU or the CPU.

Self-contained on purpose: it needs torch, transformers and gguf only, not lightmem's other dependencies, so it runs
on a bare GPU machine with the working tree. The prompts are answered as ``llm=qwen05`` answers them (one user
message, the model's own chat template, greedy, ``max_new_tokens`` of the recording), in batches sorted by length;
the GGUF is dequantized to bf16 on a GPU, fp32 on the CPU (``--quant nf4``: then re-loaded in 4-bit NF4 through bitsandbytes, as
``TransformersLLM(load_in_4bit=True)`` loads a model).

    python tools/answer_prompts.py outputs/prompts/defaults.jsonl --gguf ~/.cache/lightmem/gguf/Qwen2.5-Coder-0.5B-Instruct.gguf \\
        --out outputs/prompts/defaults.answers.jsonl
    python tools/answer_prompts.py prompts.jsonl.gz --parts /root/g --sha256 1d96...c4ff32 --out answers.jsonl   # a GGUF split in parts
    python tools/answer_prompts.py a.jsonl.gz b.jsonl.gz --gguf model.gguf --out answers/   # answers/a.answers.jsonl, ...
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path


def read_jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def joined(parts: Path) -> Path:
    """The GGUF split into ``parts/part*`` files, joined once (name order) into ``parts/model.gguf``."""
    out = parts / "model.gguf"
    if not out.exists():
        tmp = out.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            for p in sorted(parts.glob("part*")):
                f.write(p.read_bytes())
        tmp.replace(out)
    return out


def load(gguf: Path, quant: str, device: str):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tok.padding_side = "left"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=dtype)
    if quant == "nf4":
        from safetensors.torch import save_model
        from transformers import BitsAndBytesConfig

        model.hf_quantizer = None  # the GGUF loader's mark: the weights are plain tensors now
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        folder = Path(tempfile.mkdtemp(prefix="answer-prompts-"))
        model.config.save_pretrained(folder)
        save_model(model, str(folder / "model.safetensors"))
        del model
        model = AutoModelForCausalLM.from_pretrained(str(folder), device_map={"": 0}, quantization_config=BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16))
    else:
        model = model.to(device)
    return tok, model.eval()


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".jsonl"):
        name = name.removesuffix(suffix)
    return name


def answer_file(tok, model, rows: list[dict], batch_size: int, out: Path) -> None:
    """Answer ``rows`` (recorded prompts) in batches sorted by length and write ``out`` (one {id, answer} a line)."""
    import torch

    texts = [tok.apply_chat_template([{"role": "user", "content": r["prompt"]}], tokenize=False, add_generation_prompt=True)
             for r in rows]
    order = sorted(range(len(rows)), key=lambda i: -len(texts[i]))
    answers: dict[str, str] = {}
    t1, n_in = time.perf_counter(), 0
    for s in range(0, len(order), batch_size):
        idx = order[s : s + batch_size]
        enc = tok([texts[i] for i in idx], return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
        n_in += int(enc["attention_mask"].sum())
        new = max(int(rows[i].get("max_new_tokens") or 32) for i in idx)
        with torch.no_grad():
            out_ids = model.generate(**enc, max_new_tokens=new, do_sample=False, pad_token_id=tok.pad_token_id or tok.eos_token_id)
        for j, i in enumerate(idx):
            answers[rows[i]["id"]] = tok.decode(out_ids[j, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    took = time.perf_counter() - t1
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w") as f:
        for r in rows:
            f.write(json.dumps({"id": r["id"], "answer": answers[r["id"]]}) + "\n")
    print(f"answered {len(rows)} prompts in {took:.1f} s ({1000 * took / max(1, len(rows)):.0f} ms each, batches of "
          f"{batch_size}; {n_in / max(1, len(rows)):.0f} prompt tokens each); wrote {out}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("prompts", type=Path, nargs="+",
                    help="prompt files written by llm=record (.jsonl or .jsonl.gz); the model is loaded once for all")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--gguf", type=Path, help="the reader's GGUF file")
    src.add_argument("--parts", type=Path, help="a folder of part* files that join into the GGUF")
    ap.add_argument("--sha256", default="", help="refuse a GGUF whose sha256 differs (the pinned reader's, say)")
    ap.add_argument("--out", type=Path, required=True,
                    help="answers, one {id, answer} line per prompt; with several prompt files a folder, where each "
                         "file's answers are written as NAME.answers.jsonl as soon as they are done")
    ap.add_argument("--quant", choices=("bf16", "nf4"), default="bf16")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--limit", type=int, default=0, help="answer the first N prompts only")
    ap.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    args = ap.parse_args(argv)

    import torch

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    if args.quant == "nf4" and device != "cuda":
        ap.error("--quant nf4 needs CUDA (bitsandbytes)")
    gguf = args.gguf if args.gguf else joined(args.parts)
    if args.sha256:
        digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
        if digest != args.sha256:
            print(f"{gguf}: sha256 {digest}, expected {args.sha256}: refused", file=sys.stderr)
            return 1
    t0 = time.perf_counter()
    tok, model = load(gguf, args.quant, device)
    footprint = model.get_memory_footprint() / 2**30
    kind = "nf4" if args.quant == "nf4" else ("bf16" if device == "cuda" else "fp32")
    print(f"loaded {gguf.name} ({kind}, {device}) in {time.perf_counter() - t0:.1f} s, {footprint:.3f} GiB", flush=True)
    outs = [args.out] if len(args.prompts) == 1 else [args.out / f"{_stem(f)}.answers.jsonl" for f in args.prompts]
    if len(set(outs)) < len(outs):
        ap.error("two prompt files share a name; their answers would overwrite each other")
    for prompts, out in zip(args.prompts, outs):
        rows = read_jsonl(prompts)
        rows = rows[: args.limit] if args.limit else rows
        answer_file(tok, model, rows, args.batch_size, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
