"""Evaluation, by kind: ``harnesses/`` (the System protocol, LoCoMo, LongMemEval, QA, baselines),
``benchmarks/`` (latency, scale, growth, encoder speed, the optional parts' benches), ``reports/`` (comparison
over seeds, tables, failures), ``schemas`` (the configs several entry points share) and ``runs/`` (one ``run(cfg)``
per eval/*.py entry point). The pure scores they use live below, in ``lightmem.metrics``.

A new benchmark is three files: ``runs/<name>.py`` (``run``, ``metrics`` and its config as ``SCHEMA``; a big one
keeps its measurement in ``benchmarks/``), ``conf/<name>.yaml`` and the stub ``eval/<name>.py`` that
``runs.entry.hydra_entry`` makes (docs/evaluation.md, "Adding a benchmark").
"""
