"""Distil the served embedder's document vectors into all-MiniLM-L6-v2 (LoRA + a linear map to the served space):
the cheap document encoder of ``encoder=experimental/mpnet_split`` (``lightmem.training.doc_encoder``).

    python train/doc_encoder.py
    python train/doc_encoder.py -m lora.r=16,32 optim.lr=5e-4,1e-3 logger=wandb
"""
from lightmem.training.doc_encoder import train_doc_encoder
from lightmem.training.entry import train_entry

main = train_entry(__file__, "train_doc_encoder", train_doc_encoder, digits=4)
run = main.run  # the run without Hydra, for whoever loads this script (tests call run(cfg))

if __name__ == "__main__":
    main()
