"""Evaluation, by kind: ``harnesses/`` (the System protocol, LoCoMo, LongMemEval, QA, baselines),
``benchmarks/`` (latency, scale, growth, encoder speed, the optional parts' benches), ``reports/`` (comparison
over seeds, tables, failures), ``schemas`` (the entry points' configs) and ``runs/`` (one ``run(cfg)`` per
eval/*.py entry point). The pure scores they use live below, in ``lightmem.metrics``.

A new benchmark is a module in ``benchmarks/`` (its harness), a ``runs/`` module with its ``run(cfg)``, and a
Hydra stub in eval/ with its conf/ file; its config dataclass goes in ``schemas``.
"""
