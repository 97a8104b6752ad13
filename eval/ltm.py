"""LTM benchmark: nodes per turn, seconds per consolidation batch, search latency idle vs
during consolidation (writes numbers, asserts nothing).

    python eval/ltm.py                          # LoCoMo dev conversation 0, MiniLM, CPU
    python eval/ltm.py conversation=3 copies=3 n_queries=150
"""
from lightmem.evaluation.runs.entry import hydra_entry

main = hydra_entry(__file__, "ltm", "LTM benchmark", config_name="ltm_bench")
run = main.run  # the runner, for whoever loads this script (tests call run(cfg))

if __name__ == "__main__":
    main()
