"""Evaluation: the System protocol, one harness module per benchmark, QA, reports.

Layout: ``system`` (what a system under test offers),
``qa`` (answering and judging, shared by the benchmarks), ``locomo``/``longmemeval``/``growth``/``latency``/
``encoder_speed``/``roles``/``sensory``/``ltm`` (the harnesses), ``baselines``, ``inject`` (stress-test
noise), ``comparison`` (runs over seeds, paired bootstrap), ``report`` (tables and plots), ``failures``,
``schemas`` (the entry points' configs) and ``runs/`` (one ``run(cfg)`` per eval/*.py entry point).
The pure scores they use live below, in ``lightmem.metrics``.
"""
