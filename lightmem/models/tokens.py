"""Token counting: the ``TokenCounter`` protocol and its counters (a Hugging Face tokenizer, whitespace, a cache).

A prompt budget is counted with the reader's tokenizer (``lightmem.models.prompt_tokens`` chooses it); the
embedder's counter gives each memory's ``n_tokens`` and what the sensory stage buffers."""
from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens of texts, without special tokens and without truncation."""

    name: str

    def count(self, texts: Sequence[str]) -> list[int]: ...

    def truncate(self, text: str, max_tokens: int) -> str: ...


# Characters that BERT's normaliser deletes or a pre-tokeniser may not split on as Python's str.split does
# (control and format characters, non-ASCII spaces): a text holding one is counted whole.
_NOT_WORD_SAFE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\xa0\xad\u1680\u180e\u2000-\u200f\u2028-\u202f"
                            "\u205f-\u206f\u3000\ufeff\ufff0-\uffff]")
_WORD_SPLITTING = frozenset({"BertPreTokenizer", "Whitespace", "WhitespaceSplit"})
_WORD_SAFE_NORMALIZERS = frozenset({"NoneType", "BertNormalizer", "Lowercase", "NFD", "NFKD", "NFC", "NFKC", "StripAccents"})


_LOCKS_LOCK = threading.Lock()


def tokenizer_lock(tokenizer) -> threading.Lock:
    """The lock every lightmem call into this Hugging Face tokenizer holds: a fast tokenizer changes its
    truncation state per call and raises "Already borrowed" when two threads call it at once (the
    background indexer embeds while the caller counts tokens and a search encodes its query)."""
    lock = getattr(tokenizer, "_lightmem_lock", None)
    if lock is None:
        with _LOCKS_LOCK:
            lock = getattr(tokenizer, "_lightmem_lock", None)
            if lock is None:
                lock = threading.Lock()
                tokenizer._lightmem_lock = lock
    return lock


class HFTokenCounter:
    """Counts with a Hugging Face tokenizer (fast tokenizers batch this in Rust).

    With a tokenizer that cuts text at whitespace before it splits words into pieces (BERT's WordPiece, as
    MiniLM and mpnet use), a text's count is the sum of its words' counts: words are counted once and
    cached, so counting an excerpt or a squeezed sentence of words seen before is a few dict lookups.
    """

    def __init__(self, tokenizer, name: str = "hf", max_words: int = 500_000) -> None:  # tokenizer: PreTrainedTokenizerBase
        self._tok = tokenizer
        self.name = name
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self._words: dict[str, int] | None = None  # word -> tokens, when counts add up over words
        if backend is not None and type(backend.pre_tokenizer).__name__ in _WORD_SPLITTING \
                and type(backend.normalizer).__name__ in _WORD_SAFE_NORMALIZERS:
            from tokenizers import Tokenizer

            self._backend = Tokenizer.from_str(backend.to_str())  # a private copy: no truncation, no padding
            self._backend.no_truncation()
            self._backend.no_padding()
            self._words, self.max_words, self._lock = {}, max_words, threading.Lock()

    @classmethod
    def from_path(cls, path: str) -> "HFTokenCounter":
        from transformers import AutoTokenizer

        return cls(AutoTokenizer.from_pretrained(path), name=str(path))

    def count(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        if self._words is None:
            return self._count_whole(texts)
        out: list[int | None] = [None] * len(texts)
        whole = [i for i, t in enumerate(texts) if _NOT_WORD_SAFE.search(t)]
        for i, n in zip(whole, self._count_whole([texts[i] for i in whole])):
            out[i] = n
        known = self._words
        split = {i: t.split() for i, t in enumerate(texts) if out[i] is None}
        with self._lock:  # one server's threads share the counter; clearing must not race a sum
            new = {w for words in split.values() for w in words if w not in known}
            if new:
                if len(known) + len(new) > self.max_words:  # bounded: start again from this batch's words
                    known.clear()
                    new = {w for words in split.values() for w in words}
                fresh = list(new)
                # A few new words (one turn's): one call each. encode_batch hands work to a thread pool, which
                # costs more than it saves below ~64 words (0.4-0.8 ms against 0.06-0.25 for 3-8 words, 2 cores).
                encs = (self._backend.encode_batch(fresh, add_special_tokens=False) if len(fresh) >= 64 else
                        [self._backend.encode(w, add_special_tokens=False) for w in fresh])
                known.update(zip(fresh, (len(e.ids) for e in encs)))
            for i, words in split.items():
                out[i] = sum(known[w] for w in words)
        return out  # type: ignore[return-value]

    def _count_whole(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        with tokenizer_lock(self._tok):
            enc = self._tok(list(texts), add_special_tokens=False, truncation=False, verbose=False)
        return [len(ids) for ids in enc["input_ids"]]

    def truncate(self, text: str, max_tokens: int) -> str:
        if max_tokens <= 0:
            return ""
        with tokenizer_lock(self._tok):
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
