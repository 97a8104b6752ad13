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
    # NLTK's PorterStemmer is the one LoCoMo's official scorer uses; it needs no data download. Importing it through
    # ``nltk`` runs the package's __init__, which loads scipy.stats and scikit-learn (~1.8 s of every process that
    # stems a word: each CLI call, server start and evaluation): its module is loaded on its own instead.
    try:
        return _standalone_porter()
    except Exception:  # noqa: BLE001 - another NLTK layout: the ordinary import, slower, same stemmer
        from nltk.stem import PorterStemmer

        return PorterStemmer()


_NLTK_IMPORT = re.compile(r"^from nltk(?:\.[\w.]+)? import ([\w, ]+)$", re.M)


def _standalone_porter():
    """NLTK's ``nltk/stem/porter.py`` run as a module of its own, without the ``nltk`` package's __init__.

    Its ``from nltk... import`` lines bring the ``StemmerI`` interface (an abstract base with no behaviour) and two
    helpers of its printing demo; they are bound to stand-ins. Any other module-level import of NLTK in the file (a
    layout this does not know) raises, and ``_porter`` falls back to the ordinary import."""
    import importlib.util
    import types
    from pathlib import Path

    spec = importlib.util.find_spec("nltk")  # finds the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("nltk is not installed (pip install nltk)")
    path = Path(next(iter(spec.submodule_search_locations))) / "stem" / "porter.py"

    def stand_in(match: re.Match[str]) -> str:
        bound = [n.strip() for n in match.group(1).split(",")]
        return "; ".join(f"{n} = {'object' if n == 'StemmerI' else 'None'}" for n in bound)

    source = _NLTK_IMPORT.sub(stand_in, path.read_text(encoding="utf-8"))
    if "nltk" in "".join(line for line in source.splitlines() if line.startswith(("import", "from"))):
        raise ImportError(f"{path} imports more of nltk than its stemmer interface")  # at module level; its demo()
        # imports NLTK's corpora inside the function, which nothing here calls
    module = types.ModuleType("lightmem._nltk_porter")
    module.__file__ = str(path)
    exec(compile(source, str(path), "exec"), module.__dict__)  # noqa: S102 - NLTK's own file, as installed
    return module.PorterStemmer()


@lru_cache(maxsize=200_000)
def stem(word: str) -> str:
    """Porter stem of one lower-case word (cached: the vocabulary of a store is small)."""
    return _porter().stem(word)


def words(text: str) -> list[str]:
    """Lower-case word tokens (curly apostrophes folded), stop words kept, not stemmed."""
    return _WORD.findall(text.lower().replace("\u2019", "'"))


_ANALYZED: dict[str, str] = {}  # word → its stem, or "" for a stop word (a vocabulary is small; bounded below)
# Version of ``analyze``: stored BM25 terms (view snapshots) made by another version are rebuilt.
ANALYZER = 2
# Any script's words: letters and digits of every alphabet, with the combining marks Python's \w leaves out
# (accents, Hebrew and Arabic points, the vowel signs of Indic scripts), and an apostrophe suffix as in English.
_LETTER = "(?:[^\\W_]|[\u0300-\u036f\u0591-\u05c7\u0610-\u061a\u064b-\u065f\u0670\u0900-\u0dff\u0e00-\u0eff])"
_UWORD = re.compile(f"{_LETTER}+(?:'{_LETTER}+)?")
# Scripts written without spaces between words (Thai, Lao, Myanmar, Khmer, Japanese kana, Han) and Hangul, whose
# words take particles: indexed as overlapping character pairs, so a query finds them without a dictionary.
_DENSE = re.compile("[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff"
                    "\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002ffff]+")


def analyze(text: str) -> list[str]:
    """Lower-case words minus stop words, Porter-stemmed. Pure and deterministic.

    English text (ASCII) is analysed as the lexical index always did. Words of other alphabets are
    case-folded, not stemmed; runs of a script written without spaces (Chinese, Japanese, Thai...) or of
    Hangul become overlapping character pairs (a run of one character stays a term).
    """
    if text.isascii():
        return _ascii_terms(words(text))
    out: list[str] = []
    for token in _UWORD.findall(text.lower().replace("\u2019", "'")):
        if token.isascii():
            out += _ascii_terms(_WORD.findall(token))
            continue
        at = 0
        for run in _DENSE.finditer(token):
            out += _other_terms(token[at:run.start()])
            chars = run.group(0)
            out += [chars] if len(chars) == 1 else [chars[i:i + 2] for i in range(len(chars) - 1)]
            at = run.end()
        out += _other_terms(token[at:])
    return out


def _other_terms(part: str) -> list[str]:
    """A word (or the part of one between runs of a spaceless script): English stemmed, others case-folded."""
    if not part:
        return []
    return _ascii_terms(_WORD.findall(part)) if part.isascii() else [part.casefold()]


def _ascii_terms(tokens: list[str]) -> list[str]:
    known = _ANALYZED.get
    out = []
    for w in tokens:
        s = known(w)
        if s is None:
            if len(_ANALYZED) > 200_000:
                _ANALYZED.clear()
            s = _ANALYZED[w] = "" if w in STOPWORDS else stem(w)
        if s:
            out.append(s)
    return out


def warm(texts: list[str]) -> None:
    """Analyse ``texts`` once, for the caches alone: stemming unseen words is the costly part of indexing a
    long text, so a server that calls this before taking its lock holds the lock for a cached analysis."""
    for text in texts:
        analyze(text)
