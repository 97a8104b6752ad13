"""Text normalisation shared by the lexical index and the QA metrics."""
from __future__ import annotations

import re
from functools import lru_cache

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
# A short English stop list: BM25 gains nothing from these and they dominate postings.
STOPWORDS = frozenset(
    """a an and are as at be but by for if in into is it its of on or such that the their then there these
    they this to was will with i me my we our you your he him his she her them what which who whom do does did
    have has had am been being so not no can just than too very s t don should now""".split()
)


@lru_cache(maxsize=1)
def _porter():
    # NLTK's PorterStemmer is the one LoCoMo's official scorer uses; it needs no data download.
    from nltk.stem import PorterStemmer

    return PorterStemmer()


@lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    """Porter stem of one lower-case word (cached: the vocabulary of a store is small)."""
    return _porter().stem(word)


def words(text: str) -> list[str]:
    """Lower-case word tokens (curly apostrophes folded), stop words kept, not stemmed."""
    return _WORD.findall(text.lower().replace("\u2019", "'"))


_ANALYZED: dict[str, str] = {}  # word → its stem, or "" for a stop word (a vocabulary is small; bounded below)


def analyze(text: str) -> list[str]:
    """Lower-case words minus stop words, Porter-stemmed. Pure and deterministic."""
    known = _ANALYZED.get
    out = []
    for w in words(text):
        s = known(w)
        if s is None:
            if len(_ANALYZED) > 200_000:
                _ANALYZED.clear()
            s = _ANALYZED[w] = "" if w in STOPWORDS else stem(w)
        if s:
            out.append(s)
    return out
