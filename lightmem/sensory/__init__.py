"""The optional sensory stage before the Writer (off by default): compression at a rate, topic segmentation, gates and
the per-user sensory and STM buffers. The text rules it applies are ``lightmem.language``'s, the word scorers it
compresses with are ``lightmem.models.word_scorer``'s."""
