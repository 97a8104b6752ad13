"""LongMemEval evaluation (any file of the format: oracle or S, plain or gzipped).

    python eval/longmemeval.py data.max_instances=100 out_dir=outputs/lme_oracle
    python eval/longmemeval.py data.path='${paths.data}/longmemeval/longmemeval_s_dev.json.gz' data.max_instances=50   # after `lightmem data fetch`
    python eval/longmemeval.py qa.enabled=true +qa.judge='{_target_: lightmem.llm.openai_backend.OpenAICompatLLM, base_url: http://host:8000/v1, model: gpt-4o}'
"""
from lightmem.evaluation.runs.entry import hydra_entry

main = hydra_entry(__file__, "longmemeval", "LongMemEval")
run = main.run  # the runner, for whoever loads this script (tests call run(cfg))

if __name__ == "__main__":
    main()
