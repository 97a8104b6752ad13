"""Token counts for budgets (models/tokens.py): counting by words gives the tokenizer's own counts."""
from __future__ import annotations

TEXTS = [
    "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
    "Melanie: We painted a sunset together!! It's on the wall now... (see photo)",
    "Prices: $1,299.99 vs. €1.050 — 2023-05-08, 10:30am; e-mail: jo@example.com",
    "naïve café déjà-vu Straße ﬁne İstanbul",
    "中文字符 mixed with English and emoji 🙂🎉",
    "a" * 150 + " short",  # a word longer than WordPiece reads becomes one unknown token
    "tab\tnew\nline\r\nthree  spaces",
    "control\x0bchar\x1cseparators\x85next",  # Python splits here, BERT's normaliser deletes these
    "no\u00a0break\u2003em\u200bzero\ufeffwidth\u3000ideographic\u2028line",
    "soft\u00adhyphen and co\u0301mbining accents",
    "",
    "   ",
]


def _whole(tok, texts):
    return [len(ids) for ids in tok(list(texts), add_special_tokens=False, truncation=False, verbose=False)["input_ids"]]


def test_counting_by_words_gives_the_tokenizers_counts(tiny_models):
    from lightmem.models.tokens import HFTokenCounter

    counter = HFTokenCounter(tiny_models.tok)
    assert counter._words is not None  # BERT's WordPiece cuts at whitespace first: counts add up over words
    assert counter.count(TEXTS) == _whole(tiny_models.tok, TEXTS)
    assert [counter.count([t])[0] for t in TEXTS] == _whole(tiny_models.tok, TEXTS)  # again, from the word cache
    assert counter._words["support"] == 1 and counter.count([]) == []


def test_the_word_cache_is_bounded_and_counts_stay_exact(tiny_models):
    from lightmem.models.tokens import HFTokenCounter

    counter = HFTokenCounter(tiny_models.tok, max_words=8)
    biggest_batch = max(len(set(f"{t} {t.upper()}".split())) for t in TEXTS)
    for t in TEXTS:
        assert counter.count([t, t.upper()]) == _whole(tiny_models.tok, [t, t.upper()])
        assert len(counter._words) <= max(8, biggest_batch)  # past the bound it starts again from one batch
    assert 0 < len(counter._words) < sum(len(set(f"{t} {t.upper()}".split())) for t in TEXTS)  # it was cleared


def test_a_tokenizer_whose_tokens_carry_spaces_is_counted_whole():
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from lightmem.models.tokens import HFTokenCounter

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)  # GPT-2 style: " word" is one token
    bpe.train_from_iterator(TEXTS * 20, trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe)
    counter = HFTokenCounter(tok)
    assert counter._words is None
    assert counter.count(TEXTS) == _whole(tok, TEXTS)
