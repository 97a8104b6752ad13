"""The former home of the word scorers (compressors): they live in ``lightmem.models.word_scorer`` now, next to
the models they run. This module keeps the old import path, and the ``_target_`` of configs written before the
move, working for one release."""
from lightmem.models.word_scorer import (  # noqa: F401
    Compressor,
    CrossEntropyCompressor,
    TokenClassifierCompressor,
    default_word_scorer,
    keep_top_rate,
    protected,
    select_words,
)
