"""llama.cpp through llama-cpp-python, when it is installed (an optional extra, never required)."""
from __future__ import annotations

import time
from collections.abc import Sequence

from lightmem.errors import ModelPackageMissingError
from lightmem.llm.base import GenerationError, UsageMeter
from lightmem.models.registry import ModelRegistry


class LlamaCppLLM:
    """Runs a GGUF file (default: the packaged SmolLM2 Q4_1) with llama.cpp.

    Args:
        model: Packaged model name or a ``.gguf`` path.
        n_ctx: Context window.
        n_threads: CPU threads (None = llama.cpp's default).
        n_gpu_layers: Layers offloaded to a GPU build (-1 = all).
        max_new_tokens: Default completion length.
    """

    def __init__(self, model: str = "SmolLM2-135M-Instruct", n_ctx: int = 2048, n_threads: int | None = None,
                 n_gpu_layers: int = 0, max_new_tokens: int = 128, meter: UsageMeter | None = None) -> None:
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise ModelPackageMissingError("llama.cpp runtime", "llama-cpp-python", "(pip install 'lightmem-slm[llamacpp]')") from exc
        path = ModelRegistry().path(model)
        self._llm = Llama(model_path=str(path), n_ctx=n_ctx, n_threads=n_threads, n_gpu_layers=n_gpu_layers, verbose=False)
        self.name, self.max_new_tokens = f"llamacpp:{path.name}", max_new_tokens
        self.meter = meter or UsageMeter()

    def generate(self, prompts: Sequence[str], *, role: str = "default", max_new_tokens: int | None = None) -> list[str]:
        outs = []
        for p in prompts:
            t0 = time.perf_counter()
            try:
                r = self._llm.create_chat_completion(messages=[{"role": "user", "content": p}],
                                                     max_tokens=max_new_tokens or self.max_new_tokens, temperature=0.0)
            except (RuntimeError, ValueError) as exc:
                self.meter.failure(role)
                raise GenerationError(f"llama.cpp failed: {exc}") from exc
            usage = r.get("usage", {})
            self.meter.record(role, usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0), (time.perf_counter() - t0) * 1000)
            outs.append(r["choices"][0]["message"]["content"] or "")
        return outs
