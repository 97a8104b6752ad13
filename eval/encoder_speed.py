"""Encoder speed per backend: single-query embed P50/P95 and ingest turns/s (writes numbers, asserts nothing).

    python eval/encoder_speed.py                                   # torch, onnx, onnx_int8 on LoCoMo dev turns
    python eval/encoder_speed.py backends=[onnx,onnx_int8] n_texts=1000 rounds=3
    python eval/encoder_speed.py busy_processes=1                  # while another process keeps one core busy
"""
from lightmem.evaluation.runs.entry import hydra_entry

main = hydra_entry(__file__, "encoder_speed")
run = main.run  # the runner, for whoever loads this script (tests call run(cfg))

if __name__ == "__main__":
    main()
