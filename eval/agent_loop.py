"""The agent-loop benchmark: an agent's own questions and answers saved under each write policy, then asked in order.

    python eval/agent_loop.py                                          # LoCoMo 3-4, arms none / all / agent
    python eval/agent_loop.py locomo_conversations=0-2 out_dir=outputs/agent_loop_dev
    python eval/agent_loop.py locomo_path=null longmemeval_path='${paths.data}/longmemeval/longmemeval_oracle_dev.json.gz'
"""
from lightmem.evaluation.runs.entry import hydra_entry

main = hydra_entry(__file__, "agent_loop", "Agent loop")
run = main.run  # the runner, for whoever loads this script (tests call run(cfg))

if __name__ == "__main__":
    main()
