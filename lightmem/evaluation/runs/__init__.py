"""One module per entry point of eval/: ``run(cfg)`` builds what the benchmark needs from its composed
config, runs the harness, writes results.json / results.md / plots to ``cfg.out_dir``, logs the metrics
and returns the results; ``metrics(results)`` gives the flat numbers a sweep can optimise
(``cfg.optimized_metric`` names one); ``SCHEMA = ("schema_<name>", XConfig)`` is the config of a benchmark no
other entry point composes. ``entry.hydra_entry`` makes each eval/ script's ``main``. The harnesses they call
take typed arguments and never read config.
"""
