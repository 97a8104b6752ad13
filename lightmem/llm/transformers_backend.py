"""A local causal LM through transformers (default: packaged SmolLM2-135M-Instruct)."""
from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from lightmem.llm.base import GenerationError, UsageMeter
from lightmem.models.registry import ModelRegistry, pick_device

log = logging.getLogger(__name__)


def cpu_has_bf16() -> bool:
    """Native bf16 matmul (AVX512-BF16 or AMX). Without it bf16 prefill is ~7x slower than fp32
    (measured on a 2-core x86 machine: 68 vs 498 tokens/s for SmolLM2-135M)."""
    try:
        with open("/proc/cpuinfo") as fh:
            flags = fh.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def auto_dtype(device: str):
    """fp16 (bf16 where supported) on CUDA; bf16 on CPUs with native support, else fp32."""
    import torch

    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.bfloat16 if cpu_has_bf16() else torch.float32


class TransformersLLM:
    """Greedy batched generation and yes/no scoring with a local model.

    Args:
        model: Packaged model name (``SmolLM2-135M-Instruct``) or a transformers folder.
        device: ``auto``, ``cpu`` or ``cuda[:N]``.
        dtype: ``auto`` (see ``auto_dtype``), ``bf16``, ``fp16`` or ``fp32``.
        load_in_4bit: 4-bit NF4 weights through bitsandbytes (CUDA only).
        adapter: Folder of a peft LoRA adapter to apply (e.g. from checkpoints/).
        max_new_tokens: Default completion length.
        batch_size: Prompts per forward pass.
        cache_dir: Registry cache (where the GGUF is converted once).
    """

    def __init__(
        self,
        model: str = "SmolLM2-135M-Instruct",
        device: str = "auto",
        dtype: str = "auto",
        load_in_4bit: bool = False,
        adapter: str | None = None,
        max_new_tokens: int = 128,
        batch_size: int = 8,
        cache_dir: str | None = None,
        meter: UsageMeter | None = None,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.device = pick_device(device)
        path = ModelRegistry(cache_dir).causal_lm_path(model)
        torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}.get(dtype)
        if torch_dtype is None:
            torch_dtype = auto_dtype(self.device)
        kwargs = {"dtype": torch_dtype}
        if load_in_4bit:
            if not self.device.startswith("cuda"):
                raise ValueError("load_in_4bit needs CUDA; on CPU use dtype=bf16")
            from transformers import BitsAndBytesConfig

            kwargs["quantization_config"] = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch_dtype)
            kwargs["device_map"] = {"": self.device}
        lm = AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
        if adapter:
            from peft import PeftModel

            lm = PeftModel.from_pretrained(lm, adapter)
        if not load_in_4bit:
            lm = lm.to(self.device)
        self._init(lm, AutoTokenizer.from_pretrained(str(path)), f"transformers:{path.name}", max_new_tokens, batch_size, meter)

    @classmethod
    def from_objects(cls, model, tokenizer, name: str = "custom", max_new_tokens: int = 32, batch_size: int = 8,
                     meter: UsageMeter | None = None) -> "TransformersLLM":
        """Wrap an already-built model and tokenizer (tests use tiny random models)."""
        self = cls.__new__(cls)
        self.device = str(next(model.parameters()).device)
        self._init(model, tokenizer, name, max_new_tokens, batch_size, meter)
        return self

    def _init(self, model, tokenizer, name, max_new_tokens, batch_size, meter) -> None:
        model.eval()
        tokenizer.padding_side = "left"  # generation continues from the right end of every row
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
        self.model, self.tok, self.name = model, tokenizer, name
        self.max_new_tokens, self.batch_size = max_new_tokens, batch_size
        self.meter = meter or UsageMeter()
        self._yes_no = self._answer_ids()

    def _chat(self, prompt: str) -> str:
        if getattr(self.tok, "chat_template", None):
            return self.tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False)
        return prompt + "\nAnswer: "

    def _answer_ids(self) -> tuple[list[int], list[int]]:
        def ids(words):
            out = set()
            for w in words:
                toks = self.tok(w, add_special_tokens=False)["input_ids"]
                if len(toks) == 1:
                    out.add(toks[0])
            return sorted(out)

        return ids(["yes", "Yes", " yes", " Yes", "YES"]), ids(["no", "No", " no", " No", "NO"])

    def _encode(self, batch: list[str]):
        enc = self.tok(batch, return_tensors="pt", padding=True, add_special_tokens=False)
        enc.pop("token_type_ids", None)  # decoder-only models take none (BERT-style tokenizers add them)
        return enc.to(self.model.device)

    def generate(self, prompts: Sequence[str], *, role: str = "default", max_new_tokens: int | None = None) -> list[str]:
        import torch

        outs: list[str] = []
        n_new = max_new_tokens or self.max_new_tokens
        for i in range(0, len(prompts), self.batch_size):
            batch = [self._chat(p) for p in prompts[i : i + self.batch_size]]
            t0 = time.perf_counter()
            try:
                enc = self._encode(batch)
                with torch.inference_mode():
                    gen = self.model.generate(**enc, max_new_tokens=n_new, do_sample=False, pad_token_id=self.tok.pad_token_id)
            except (RuntimeError, ValueError) as exc:
                self.meter.failure(role)
                raise GenerationError(f"{self.name} failed to generate: {exc}") from exc
            new = gen[:, enc["input_ids"].shape[1] :]
            texts = self.tok.batch_decode(new, skip_special_tokens=True)
            n_out = int((new != self.tok.pad_token_id).sum())
            self.meter.record(role, int(enc["attention_mask"].sum()), n_out, (time.perf_counter() - t0) * 1000)
            outs.extend(texts)
        return outs

    def yes_no_logits(self, prompts: Sequence[str]):
        """logit P(yes) - logit P(no) of the first answer token, with gradients (training uses this)."""
        import torch

        yes, no = self._yes_no
        if not yes or not no:
            raise GenerationError(f"{self.name}'s tokenizer has no single-token yes/no")
        logits = self.model(**self._encode([self._chat(p) for p in prompts])).logits[:, -1, :].float()
        return torch.logsumexp(logits[:, yes], dim=-1) - torch.logsumexp(logits[:, no], dim=-1)

    def yes_probability(self, prompts: Sequence[str], *, role: str = "default") -> list[float]:
        """P(yes) / (P(yes) + P(no)) of the first answer token, one forward pass per batch."""
        import torch

        out: list[float] = []
        for i in range(0, len(prompts), self.batch_size):
            batch = list(prompts[i : i + self.batch_size])
            t0 = time.perf_counter()
            with torch.inference_mode():
                diff = self.yes_no_logits(batch)
            out.extend(torch.sigmoid(diff).tolist())
            n_in = sum(len(self.tok(self._chat(p), add_special_tokens=False)["input_ids"]) for p in batch)
            self.meter.record(role, n_in, 0, (time.perf_counter() - t0) * 1000)
        return out
