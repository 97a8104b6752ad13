"""Any OpenAI-compatible chat endpoint (OpenAI, Ollama, vLLM, llama.cpp server), stdlib HTTP only."""
from __future__ import annotations

import json
import logging
import os
import time
import urllib.error
import urllib.request
from collections.abc import Sequence

from lightmem.llm.base import GenerationError, UsageMeter

log = logging.getLogger(__name__)
_RETRYABLE = {408, 409, 425, 429, 500, 502, 503, 504}


class OpenAICompatLLM:
    """POSTs ``/chat/completions`` with retries and exponential backoff.

    Args:
        base_url: e.g. ``http://localhost:11434/v1`` (Ollama) or ``http://gpu-box:8000/v1`` (vLLM).
        model: Model name the server knows (the paper ran ``llama3.2:1b`` on Ollama).
        api_key_env: Environment variable holding the key (sent as a Bearer token if set).
        timeout_s: Per-request timeout.
        max_retries: Retries after the first attempt, on timeouts, connection errors and 429/5xx.
        backoff_s: First backoff; doubles each retry.
        max_new_tokens: Default completion length.
        temperature: Sampling temperature (0 = greedy, for reproducible control outputs).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        timeout_s: float = 30.0,
        max_retries: int = 2,
        backoff_s: float = 0.5,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        meter: UsageMeter | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.name = model, f"openai:{model}"
        self.api_key_env = api_key_env
        self.timeout_s, self.max_retries, self.backoff_s = timeout_s, max_retries, backoff_s
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self.meter = meter or UsageMeter()

    def generate(self, prompts: Sequence[str], *, role: str = "default", max_new_tokens: int | None = None) -> list[str]:
        return [self._one(p, role, max_new_tokens or self.max_new_tokens) for p in prompts]

    def _one(self, prompt: str, role: str, max_new_tokens: int) -> str:
        body = json.dumps({
            "model": self.model, "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_new_tokens, "temperature": self.temperature,
        }).encode()
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        last: Exception | None = None
        for attempt in range(self.max_retries + 1):
            t0 = time.perf_counter()
            try:
                req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    data = json.loads(resp.read().decode("utf-8"))
                text = data["choices"][0]["message"]["content"] or ""
                usage = data.get("usage") or {}
                self.meter.record(role, int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0)),
                                  (time.perf_counter() - t0) * 1000)
                return text
            except urllib.error.HTTPError as exc:
                last = exc
                if exc.code not in _RETRYABLE:
                    break
            except (urllib.error.URLError, TimeoutError, ConnectionError, json.JSONDecodeError, KeyError, IndexError) as exc:
                last = exc
            if attempt < self.max_retries:
                time.sleep(self.backoff_s * (2**attempt))
        self.meter.failure(role)
        raise GenerationError(f"{self.url} failed after {self.max_retries + 1} attempts: {last}")
