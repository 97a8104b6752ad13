"""Read path: pure scoring functions, the two-stage engine, Stage 2's protocol and the selectors that generate
nothing (``stage2``; the ones that run a small language model are ``lightmem.roles.selector``), the ranker's
features and trees, excerpts, and the composer."""
