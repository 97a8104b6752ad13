"""Train the memory embedder (LoRA on a bi-encoder, all-mpnet-base-v2 by default); export the best adapter and its model card
(``lightmem.training.embedder.train_embedder``).

    python train/embedder.py
    python train/embedder.py -m lora.r=8,16 optim.lr=5e-4,1e-3
"""
from lightmem.training.embedder import train_embedder
from lightmem.training.entry import train_entry

main = train_entry(__file__, "train_embedder", train_embedder, shown=lambda k: "recall_all" in k)
run = main.run  # the run without Hydra, for whoever loads this script (tests call run(cfg))

if __name__ == "__main__":
    main()
