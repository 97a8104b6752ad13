"""The sensory stage before the Writer (off by default): normalisation, compression at a rate, topic segmentation,
gates and the per-user sensory and STM buffers. The word scorers it compresses with live in
``lightmem.models.word_scorer``."""
