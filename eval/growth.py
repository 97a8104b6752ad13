"""MTM growth stress test (LightMem-SLM §4.5): recall and latency with and without reranking as one store grows.

    python eval/growth.py out_dir=outputs/growth
    python eval/growth.py sizes=[100,1000] filler_path=null max_questions=100
"""
from lightmem.evaluation.runs.entry import hydra_entry

main = hydra_entry(__file__, "growth", "MTM growth")
run = main.run  # the runner, for whoever loads this script (tests call run(cfg))

if __name__ == "__main__":
    main()
