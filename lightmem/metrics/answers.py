"""Answer scores: LoCoMo's answer F1, BLEU-1 and ROUGE-L, and the gold answer's coverage by a context."""
from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

import numpy as np

from lightmem.text import STOPWORDS, stem, words


def content_words(text: str) -> set[str]:
    """Lower-case words minus stop words, Porter-stemmed; numbers without leading zeros ("07" = "7")."""
    return {str(int(w)) if w.isdigit() else stem(w) for w in words(str(text)) if w not in STOPWORDS}


def answer_coverage(answer: object, context: str) -> float | None:
    """Share of the gold answer's content words found in ``context`` (None: the answer has none).

    Credits any memory that states the answer (a knowledge line, a summary, a compressed entry),
    which provenance recall cannot; it reads the context as the composer renders it.
    """
    gold = content_words(str(answer))
    if not gold:
        return None
    return len(gold & content_words(context)) / len(gold)


# -- LoCoMo's official answer F1 (snap-research/locomo, task_eval/evaluation.py) -----------
def normalize_answer(s: str) -> str:
    """Lower case, drop commas, punctuation, articles and 'and', fold white space."""
    s = str(s).replace(",", "").lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the|and)\b", " ", s)
    return " ".join(s.split())


def token_f1(prediction: str, ground_truth: str) -> float:
    """Token F1 over Porter-stemmed normalised words."""
    pred = [stem(w) for w in normalize_answer(prediction).split()]
    gold = [stem(w) for w in normalize_answer(ground_truth).split()]
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0.0
    p, r = same / len(pred), same / len(gold)
    return 2 * p * r / (p + r)


def multi_answer_f1(prediction: str, ground_truth: str) -> float:
    """Category 1: mean over comma-separated gold sub-answers of the best matching predicted part."""
    preds = [p.strip() for p in str(prediction).split(",")]
    golds = [g.strip() for g in str(ground_truth).split(",")]
    return float(np.mean([max(token_f1(p, g) for p in preds) for g in golds]))


def locomo_f1(prediction: str, answer: object, category: int) -> float:
    """LoCoMo's per-category QA score.

    1 multi-hop: sub-answer F1; 2 temporal, 4 single-hop: token F1; 3 open-domain: token F1
    against the answer before the first ';'; 5 adversarial: 1 when the prediction says
    "no information available" or "not mentioned", else 0.
    """
    prediction = str(prediction)
    if category == 5:
        low = prediction.lower()
        return float("no information available" in low or "not mentioned" in low)
    gold = str(answer)
    if category == 3:
        gold = gold.split(";")[0].strip()
    if category == 1:
        return multi_answer_f1(prediction, gold)
    if category in (2, 3, 4):
        return token_f1(prediction, gold)
    raise ValueError(f"LoCoMo categories are 1-5, got {category!r}")


# -- generation overlap: BLEU-1 and ROUGE-L (as LoCoMo / LightMem report them) ------------
def answer_tokens(s: str) -> list[str]:
    """Lower-cased word and number tokens (punctuation dropped) for the overlap metrics."""
    return re.findall(r"[a-z0-9]+", str(s).lower())


def bleu1(prediction: str, reference: str) -> float:
    """Sentence BLEU-1: clipped unigram precision times the brevity penalty; 0 for an empty prediction."""
    pred, ref = answer_tokens(prediction), answer_tokens(reference)
    if not pred or not ref:
        return 0.0
    clipped = sum((Counter(pred) & Counter(ref)).values())
    bp = 1.0 if len(pred) > len(ref) else float(np.exp(1 - len(ref) / len(pred)))
    return bp * clipped / len(pred)


def _lcs(a: Sequence[str], b: Sequence[str]) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b, 1):
            cur.append(prev[j - 1] + 1 if x == y else max(prev[j], cur[j - 1]))
        prev = cur
    return prev[-1]


def rouge_l(prediction: str, reference: str) -> float:
    """ROUGE-L F1: longest common token subsequence against both lengths."""
    pred, ref = answer_tokens(prediction), answer_tokens(reference)
    if not pred or not ref:
        return 0.0
    lcs = _lcs(pred, ref)
    if lcs == 0:
        return 0.0
    p, r = lcs / len(pred), lcs / len(ref)
    return 2 * p * r / (p + r)
