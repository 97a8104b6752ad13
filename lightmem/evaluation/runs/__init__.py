"""One module per entry point of eval/: ``run(cfg)`` builds what the benchmark needs from its composed
config, runs the harness, writes results.json / results.md / plots to ``cfg.out_dir``, logs the metrics
and returns the results; ``metrics(results)`` gives the flat numbers a sweep can optimise
(``cfg.optimized_metric`` names one). The harnesses they call take typed arguments and never read config.
"""
