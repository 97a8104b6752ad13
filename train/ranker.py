"""Fit the learned Stage-2 ranker on mined Stage-1 candidate groups; export ranker.json and its card
(``lightmem.training.ranker.train_ranker``).

    python train/ranker.py
    python train/ranker.py -m l2=1e-4,1e-3,1e-2
"""
from lightmem.training.entry import held_out, train_entry
from lightmem.training.ranker import train_ranker

main = train_entry(__file__, "train_ranker", train_ranker,
                   shown=lambda k: "overall" in k,
                   digits=4,
                   objective=held_out("test/locomo/ranker/overall/recall_all@budget"))
run = main.run  # the run without Hydra, for whoever loads this script (tests call run(cfg))

if __name__ == "__main__":
    main()
