"""Pure scores, below both evaluation and training: ``answers`` (LoCoMo answer F1, BLEU-1, ROUGE-L, answer
coverage), ``evidence`` (evidence recall and precision from provenance), ``ranking`` (precision/recall/MRR of
scored candidates, recall and NDCG of ranked ids, classification F1) and ``stats`` (percentiles, mean ± std,
paired bootstrap). Functions of plain numbers and strings; nothing here reads a config or a store.
"""
