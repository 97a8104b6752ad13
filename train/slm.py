"""Train SLM-2 stacked on the learned ranker (selector=slm); choose alpha and N on held-apart groups; export
the adapter, stack.json and a card that scores it against the ranker on the held-out test groups
(``lightmem.training.slm.train_slm``).

    python train/slm.py
    python train/slm.py task.num_layers=6 "top_ns=[0,10,20,30]"
"""
from lightmem.training.entry import held_out, train_entry
from lightmem.training.slm import train_slm

main = train_entry(__file__, "train_slm", train_slm,
                   shown=lambda k: "overall" in k or "gain/diff" in k or k.startswith("stack"),
                   digits=4,
                   objective=held_out("test/locomo/slm/overall/recall_all@budget"))
run = main.run  # the run without Hydra, for whoever loads this script (tests call run(cfg))

if __name__ == "__main__":
    main()
