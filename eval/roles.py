"""Latency and LLM cost of each role setting on CPU (or GPU), on LoCoMo queries and turns.

    python eval/roles.py                                   # all settings, small samples
    python eval/roles.py n_queries=50 'controllers=[passthrough,fast]' 'selectors=[none]'
"""
from lightmem.evaluation.runs.entry import hydra_entry

main = hydra_entry(__file__, "roles", "Role benchmark")
run = main.run  # the runner, for whoever loads this script (tests call run(cfg))

if __name__ == "__main__":
    main()
