"""The Porter stemmer the lexical index and the QA metrics share: NLTK's own, loaded without NLTK's package."""
from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT

from lightmem import text
from lightmem.text import words

TINY = ROOT / "tests" / "fixtures"


def _vocabulary() -> set[str]:
    """Every word of the test fixtures' texts and the docs, plus the suffixes Porter's steps rewrite."""
    vocab = {"caresses", "ponies", "ties", "cats", "feed", "agreed", "plastered", "motoring", "sing", "conflated",
             "troubled", "sized", "hopping", "falling", "hissing", "fizzed", "failing", "filing", "happy", "sky",
             "relational", "conditional", "rational", "valenci", "hesitanci", "digitizer", "conformabli",
             "radicalli", "differentli", "vileli", "analogousli", "vietnamization", "predication", "operator",
             "feudalism", "decisiveness", "hopefulness", "callousness", "formaliti", "sensitiviti", "sensibiliti",
             "triplicate", "formative", "formalize", "electriciti", "electrical", "hopeful", "goodness", "revival",
             "allowance", "inference", "airliner", "gyroscopic", "adjustable", "defensible", "irritant",
             "replacement", "adjustment", "dependent", "adoption", "homologou", "communism", "activate",
             "angulariti", "homologous", "effective", "bowdlerize", "probate", "rate", "cease", "controll", "roll",
             "dying", "lying", "news", "innings", "skies", "generously", "Sunday's", "o'clock", "x", "aa"}
    for path in [*TINY.rglob("*.json"), ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        vocab.update(words(path.read_text(encoding="utf-8")))
    return vocab


def test_the_stemmer_is_nltks_porter_word_for_word():
    from nltk.stem import PorterStemmer

    vocabulary = _vocabulary()
    assert len(vocabulary) > 2000
    nltk_stems = {w: PorterStemmer().stem(w) for w in vocabulary}
    ours = text._standalone_porter()
    assert type(ours).__module__ == "lightmem._nltk_porter"  # the installed NLTK's layout is the one it knows
    assert {w: ours.stem(w) for w in vocabulary} == nltk_stems


def test_stemming_loads_no_part_of_the_nltk_package():
    code = ("import sys; from lightmem.text import analyze; analyze('They were hiking near Lisbon');"
            "print(sorted(m for m in sys.modules if m == 'nltk' or m.startswith(('nltk.', 'scipy.stats', 'sklearn'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert json.loads(out.stdout.replace("'", '"')) == []


def test_an_nltk_layout_it_does_not_know_falls_back_to_the_ordinary_import(monkeypatch):
    def unknown_layout():
        raise ImportError("another layout")

    monkeypatch.setattr(text, "_standalone_porter", unknown_layout)
    text._porter.cache_clear()
    try:
        stemmer = text._porter()
        assert type(stemmer).__module__ == "nltk.stem.porter" and stemmer.stem("hiking") == "hike"
    finally:
        text._porter.cache_clear()
