"""Train the cross-encoder Stage-2 selector (measured, not the default: the learned ranker is) with LoRA; export
the best adapter and its model card (``lightmem.training.selector.train_cross_encoder``).

    python train/cross_encoder.py
    python train/cross_encoder.py -m lora.r=4,8,16 optim.lr=3e-4,1e-3
    python train/cross_encoder.py selector_recipe@model=generative lora=causal_lm model.quantize=4bit  # SmolLM2, CUDA
"""
from lightmem.training.entry import train_entry
from lightmem.training.selector import train_cross_encoder

main = train_entry(__file__, "train_cross_encoder", train_cross_encoder,
                   shown=lambda k: "recall_all" in k or "precision" in k)
run = main.run  # the run without Hydra, for whoever loads this script (tests call run(cfg))

if __name__ == "__main__":
    main()
