"""The budget of build_context is the whole prompt, as the reader's tokenizer counts it."""
from __future__ import annotations

import random

import pytest

from lightmem.models.prompt_tokens import packaged_counter, prompt_counter
from lightmem.types import Turn

WORDS = ("I went to the support group yesterday and it was powerful . Melanie painted a sunrise last week , "
         "2023 May 7th 1:56 pm ! my dog Rex 's vet said 42 kg ? café naïve — emoji 🎉 tomorrow next month").split()


def test_the_packaged_reader_tokenizer_gives_qwen_token_ids():
    # ids as llama.cpp tokenizes these strings with Qwen2.5-Coder-0.5B-Instruct's GGUF (no special tokens)
    c = packaged_counter("qwen2.5")
    assert c._tok.encode("Hello world.", add_special_tokens=False).ids == [9707, 1879, 13]
    assert c.count(["- [8 May 2023] Caroline: I went", ""]) == [14, 0]  # every digit is a token
    assert c.truncate("hello there my friend", 2) == "hello there"


def test_prompt_counter_names():
    assert prompt_counter(None).name == "qwen2.5"
    with pytest.raises(ValueError, match="embedder"):
        prompt_counter("embedder")
    with pytest.raises(ValueError, match="tokenizer"):
        prompt_counter("no-such-tokenizer")


def _text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


@pytest.mark.fuzz  # 2,000 random questions, histories and budgets
def test_build_context_never_exceeds_its_budget_as_the_reader_counts_it(memory):
    """Thousands of random questions, recent turns and budgets: the prompt is within the budget counted by
    the reader's tokenizer, and it holds every memory Stage 2 packed (nothing dropped after packing)."""
    rng = random.Random(0)
    for s in range(6):
        turns = [Turn(f"D{s}:{i}", rng.choice(["Caroline", "Melanie"]), _text(rng, rng.randint(1, 40)),
                      1_683_000_000.0 + 86_400 * (s * 3 + i % 2)) for i in range(25)]
        memory.add_turns("u", turns)
    reader = packaged_counter("qwen2.5")
    assert memory.composer.counter is reader  # the default budget is the reader's
    dropped = 0
    for _ in range(2000):
        budget = rng.choice([rng.randint(1, 60), rng.randint(60, 400), rng.randint(400, 1500)])
        stm = [_text(rng, rng.randint(1, 30)) for _ in range(rng.randint(0, 3))]
        ctx = memory.build_context(_text(rng, rng.randint(1, 25)), "u", stm=stm, budget=budget)
        assert ctx.n_tokens == reader.count([ctx.prompt])[0] <= budget
        dropped += ctx.dropped_memories
        for m in ctx.memories:
            assert m.text in ctx.prompt  # a memory in the result is a memory the reader sees
    assert dropped == 0
