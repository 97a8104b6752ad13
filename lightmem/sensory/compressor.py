"""Token-classification pre-compression (LLMLingua-2 style): keep the words a trained
classifier most wants to keep, at a rate r.

Words are scored by the keep probability of their first sub-token, so whole words are
kept or dropped. A text is never emptied, and inputs longer than the encoder's window are
scored window by window.
"""
from __future__ import annotations

from collections.abc import Sequence

from lightmem.evaluation.ranking import keep_top_rate


class TokenClassifierCompressor:
    """Keep/drop words with the LoRA-trained MiniLM token classifier of train/compressor.py.

    Args:
        checkpoint: Folder exported by train/compressor.py.
        base_model: Packaged base the adapter was trained on.
        rate: Share of words kept (0 < r ≤ 1).
        max_words: Words per encoder window (long inputs are scored in windows).
        device: ``auto``, ``cpu`` or ``cuda``.
    """

    def __init__(self, checkpoint: str = "checkpoints/compressor", base_model: str = "all-MiniLM-L6-v2", rate: float = 0.6,
                 max_words: int = 200, device: str = "auto") -> None:
        from transformers import AutoModelForTokenClassification

        from lightmem.models.adapters import load_adapted
        from lightmem.models.registry import pick_device

        self.device = pick_device(device)
        model, tok = load_adapted(AutoModelForTokenClassification, checkpoint, base_model, "compressor", num_labels=2)
        self._init(model.to(self.device), tok, rate, max_words)

    @classmethod
    def from_objects(cls, model, tokenizer, rate: float = 0.6, max_words: int = 200) -> "TokenClassifierCompressor":
        self = cls.__new__(cls)
        self.device = str(next(model.parameters()).device)
        self._init(model, tokenizer, rate, max_words)
        return self

    def _init(self, model, tok, rate: float, max_words: int) -> None:
        if not 0.0 < rate <= 1.0:
            raise ValueError(f"rate must be in (0, 1], got {rate}")
        self.model, self.tok, self.rate, self.max_words = model, tok, rate, max_words

    def word_probs(self, words: Sequence[str]) -> list[float]:
        """P(keep) of each word (its first sub-token's), window by window."""
        import torch

        probs: list[float] = []
        for i in range(0, len(words), self.max_words):
            chunk = list(words[i : i + self.max_words])
            enc = self.tok([chunk], is_split_into_words=True, truncation=True, max_length=512, return_tensors="pt")
            with torch.inference_mode():
                p = torch.softmax(self.model(**enc.to(self.device)).logits[0].float(), dim=-1)[:, 1].tolist()
            first: dict[int, float] = {}
            for pos, w in enumerate(enc.word_ids(0)):
                if w is not None and w not in first:
                    first[w] = p[pos]
            probs.extend(first.get(j, 1.0) for j in range(len(chunk)))  # a word the tokenizer drops is kept
        return probs

    def compress(self, text: str, rate: float | None = None) -> str:
        """The words of ``text`` kept at ``rate`` (default: the instance's), in their original order."""
        words = text.split()
        if not words:
            return text
        keep = keep_top_rate(self.word_probs(words), self.rate if rate is None else rate)
        return " ".join(w for w, k in zip(words, keep) if k)
