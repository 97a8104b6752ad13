"""Train the word scorer (a token classifier, keep/drop per word) with LoRA on MiniLM; export the best adapter and its
model card (``lightmem.training.classify.train_word_scorer``).

    python train/word_scorer.py
    python train/word_scorer.py rate=0.5 -m lora.r=8,16
"""
from lightmem.training.classify import train_word_scorer
from lightmem.training.entry import train_entry

main = train_entry(__file__, "train_word_scorer", train_word_scorer)
run = main.run  # the run without Hydra, for whoever loads this script (tests call run(cfg))

if __name__ == "__main__":
    main()
