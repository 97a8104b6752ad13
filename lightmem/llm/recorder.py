"""An LLM that answers nothing: it writes each prompt it is given to a JSONL file and returns a unique id in its place.

A run with ``llm=record`` keeps everything the reader would have been asked, exactly as composed (the instruction,
the ``build_context`` prompt, the question). The prompts can then be answered elsewhere, a GPU machine say, by
``tools/answer_prompts.py``, and the answers joined back to the run by ``tools/score_answers.py``, which finds each
question's id in its ``questions.jsonl`` prediction."""
from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path

from lightmem.llm.base import UsageMeter


class PromptRecorder:
    """Appends ``{"id", "role", "prompt", "max_new_tokens"}`` per prompt to ``path`` (a new file per recorder) and
    answers each prompt with its id, ``<prefix><n>x``."""

    name = "recorder"
    records_prompts = True  # the harnesses leave its answers (ids) unscored

    def __init__(self, path: str, prefix: str = "pid", **_backend_options: object) -> None:
        self.path, self.prefix, self.meter = Path(path), prefix, UsageMeter()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("")
        self._n, self._lock = 0, threading.Lock()

    def generate(self, prompts: Sequence[str], *, role: str = "default", max_new_tokens: int | None = None) -> list[str]:
        out = []
        with self._lock, self.path.open("a") as f:
            for p in prompts:
                pid = f"{self.prefix}{self._n:06d}x"
                self._n += 1
                f.write(json.dumps({"id": pid, "role": role, "prompt": p, "max_new_tokens": max_new_tokens}) + "\n")
                self.meter.record(role, len(p.split()), 1, 0.0)
                out.append(pid)
        return out
