"""The tokenizer a prompt budget is counted with: by default the reader's, not the embedder's.

A budget is a promise about what the reader receives, so ``build_context`` counts it with the
tokenizer of the model that reads the prompt. The default reader is Qwen2.5-Coder (``conf/llm/qwen05.yaml``);
its tokenizer ships inside this package (``data/qwen2.5-tokenizer.json.gz``, taken from the reader's
GGUF, Apache-2.0 like the model), so counting needs neither the 491 MB model nor a network.

Names a setting can take (``Memory.open(tokenizer=...)``, Hydra ``memory.tokenizer``):

- ``qwen2.5``: the packaged Qwen2.5 tokenizer (the 0.5B and 1.5B readers share it; the default);
- ``embedder``: the embedder's own tokenizer (WordPiece for MiniLM and mpnet);
- a path to a ``tokenizer.json`` (optionally ``.gz``) or to a Hugging Face tokenizer folder.
"""
from __future__ import annotations

import gzip
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from lightmem.models.tokens import HFTokenCounter, TokenCounter

DEFAULT_TOKENIZER = "qwen2.5"
PACKAGED_TOKENIZERS = {"qwen2.5": Path(__file__).with_name("data") / "qwen2.5-tokenizer.json.gz"}


class FastTokenCounter:
    """Counts with a ``tokenizers.Tokenizer`` (Rust, batched), no special tokens, no truncation.

    Args:
        tokenizer: A ``tokenizers.Tokenizer``.
        name: What the counts are of (recorded in results).
    """

    def __init__(self, tokenizer, name: str) -> None:  # tokenizer: tokenizers.Tokenizer
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self._tok, self.name = tokenizer, name

    def count(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        return [len(e.ids) for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def truncate(self, text: str, max_tokens: int) -> str:
        if max_tokens <= 0:
            return ""
        enc = self._tok.encode(text, add_special_tokens=False)
        if len(enc.ids) <= max_tokens:
            return text
        cut = text[: enc.offsets[max_tokens - 1][1]]
        # Byte-level pieces can end inside a character: shorten until the count is within the limit.
        while cut and len(self._tok.encode(cut, add_special_tokens=False).ids) > max_tokens:
            cut = cut[:-1]
        return cut


@lru_cache(maxsize=8)
def _from_json(path: str) -> FastTokenCounter:
    from tokenizers import Tokenizer

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no tokenizer file at {p}")
    opener = gzip.open if p.suffix == ".gz" else open
    with opener(p, "rt", encoding="utf-8") as fh:
        return FastTokenCounter(Tokenizer.from_str(fh.read()), name=p.name.removesuffix(".gz"))


def packaged_counter(name: str = DEFAULT_TOKENIZER) -> FastTokenCounter:
    """The counter of a tokenizer shipped with lightmem (one per process)."""
    if name not in PACKAGED_TOKENIZERS:
        raise KeyError(f"unknown packaged tokenizer {name!r}; packaged: {', '.join(sorted(PACKAGED_TOKENIZERS))}")
    counter = _from_json(str(PACKAGED_TOKENIZERS[name]))
    counter.name = name
    return counter


def prompt_counter(spec: str | TokenCounter | None, embedder=None) -> TokenCounter:
    """The prompt budget's counter for a setting (see the module docstring); None is the default reader's.

    Raises:
        ValueError: ``embedder`` is asked for without an embedder, or ``spec`` names nothing known.
    """
    if spec is None:
        spec = DEFAULT_TOKENIZER
    if not isinstance(spec, str):
        if not isinstance(spec, TokenCounter):
            raise ValueError(f"tokenizer must be a name, a path or a TokenCounter, got {type(spec).__name__}")
        return spec
    if spec == "embedder":
        if embedder is None:
            raise ValueError("tokenizer='embedder' needs an embedder")
        return embedder.token_counter()
    if spec in PACKAGED_TOKENIZERS:
        return packaged_counter(spec)
    path = Path(spec).expanduser()
    if path.is_file():
        return _from_json(str(path))
    if path.is_dir():
        return HFTokenCounter.from_path(str(path))
    raise ValueError(f"tokenizer must be 'embedder', one of {sorted(PACKAGED_TOKENIZERS)}, a tokenizer.json or a "
                     f"tokenizer folder; got {spec!r}")
