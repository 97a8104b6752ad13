"""Write-path measurements: compression, topic segmentation, ingestion cost (writes numbers).

    python eval/sensory.py                                         # all parts, defaults
    python eval/sensory.py parts=[segmentation] lme_instances=0-39 seg_taus=[0.2,0.3,0.4]
    python eval/sensory.py parts=[ingest] llm=smollm2 ingest_writers=[experimental/generative]   # a real SLM
"""
from lightmem.evaluation.runs.entry import hydra_entry

main = hydra_entry(__file__, "sensory", config_name="sensory_bench")
run = main.run  # the runner, for whoever loads this script (tests call run(cfg))

if __name__ == "__main__":
    main()
