"""search() latency at 100 / 1,000 / 10,000 items of one user (writes numbers, asserts nothing).

    python eval/latency.py                                   # CPU, MiniLM, exact FAISS
    python eval/latency.py store.faiss_device=cuda encoder.backend=torch encoder.device=cuda   # GPU machine (faiss-gpu)
    python eval/latency.py encoder.backend=onnx_int8                     # the encoder on ONNX Runtime, int8
"""
from lightmem.evaluation.runs.entry import hydra_entry

main = hydra_entry(__file__, "latency")
run = main.run  # the runner, for whoever loads this script (tests call run(cfg))

if __name__ == "__main__":
    main()
