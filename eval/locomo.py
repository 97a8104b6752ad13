"""LoCoMo evaluation: evidence recall, and QA with the configured generator when qa.enabled.

    python eval/locomo.py data.conversations=0-4 out_dir=outputs/locomo_dev
    python eval/locomo.py data.path=/path/to/locomo10.json data.conversations=5-9 budget=600
    python eval/locomo.py qa.enabled=true data.categories=[1,2,3,4,5]          # + answers (SmolLM2)
    python eval/locomo.py qa.enabled=true llm=openai llm.base_url=http://host:8000/v1 \
        +qa.judge='{_target_: lightmem.llm.openai_backend.OpenAICompatLLM, base_url: http://host:8000/v1, model: gpt-4o-mini}'
    python eval/locomo.py +experiment=baseline_bm25                              # a baseline / ablation
    python eval/locomo.py -m retrieval=rrf,weighted,dense,bm25      # a Hydra sweep
"""
from lightmem.evaluation.runs.entry import hydra_entry

main = hydra_entry(__file__, "locomo", "LoCoMo")
run = main.run  # the runner, for whoever loads this script (tests call run(cfg))

if __name__ == "__main__":
    main()
