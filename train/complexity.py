"""Train the query-complexity classifier (LOW/HIGH; C_q = P(HIGH)) with LoRA on MiniLM
(``lightmem.training.classify.train_complexity``).

    python train/complexity.py
    python train/complexity.py -m lora.r=4,8 optim.lr=5e-4,1e-3
"""
from lightmem.training.classify import train_complexity
from lightmem.training.entry import train_entry

main = train_entry(__file__, "train_complexity", train_complexity)
run = main.run  # the run without Hydra, for whoever loads this script (tests call run(cfg))

if __name__ == "__main__":
    main()
