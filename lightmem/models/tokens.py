"""Token counting for budgets. Budgets are counted with the embedder's tokenizer."""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens of texts, without special tokens and without truncation."""

    name: str

    def count(self, texts: Sequence[str]) -> list[int]: ...

    def truncate(self, text: str, max_tokens: int) -> str: ...


class HFTokenCounter:
    """Counts with a Hugging Face tokenizer (fast tokenizers batch this in Rust)."""

    def __init__(self, tokenizer, name: str = "hf") -> None:  # tokenizer: PreTrainedTokenizerBase
        self._tok = tokenizer
        self.name = name

    @classmethod
    def from_path(cls, path: str) -> "HFTokenCounter":
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(path), name=str(path))

    def count(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        enc = self._tok(list(texts), add_special_tokens=False, truncation=False, verbose=False)
        return [len(ids) for ids in enc["input_ids"]]

    def truncate(self, text: str, max_tokens: int) -> str:
        if max_tokens <= 0:
            return ""
        enc = self._tok(text, add_special_tokens=False, truncation=False, return_offsets_mapping=True, verbose=False)
        offsets = enc["offset_mapping"]
        if len(offsets) <= max_tokens:
            return text
        return text[: offsets[max_tokens - 1][1]]


_WORD = re.compile(r"\w+|[^\w\s]")


class WhitespaceTokenCounter:
    """Counts words and punctuation marks; a dependency-free stand-in for tests."""

    name = "words"

    def count(self, texts: Sequence[str]) -> list[int]:
        return [len(_WORD.findall(t)) for t in texts]

    def truncate(self, text: str, max_tokens: int) -> str:
        if max_tokens <= 0:
            return ""
        matches = list(_WORD.finditer(text))
        if len(matches) <= max_tokens:
            return text
        return text[: matches[max_tokens - 1].end()]


class CachedCount:
    """Token counts of single texts with a counter made on the first count (``make_counter()``), cached and
    bounded: past ``max_size`` texts the oldest goes. What packing counts again and again (excerpts, dated
    copies) is tokenised once."""

    def __init__(self, make_counter: Callable[[], TokenCounter], max_size: int = 32_768) -> None:
        self._make, self._counter, self.max_size = make_counter, None, max_size
        self._counts: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        n = self._counts.get(text)
        if n is None:
            if self._counter is None:
                self._counter = self._make()
            n = self._counts[text] = self._counter.count([text])[0]
            if len(self._counts) > self.max_size:
                self._counts.pop(next(iter(self._counts)))
        return n
