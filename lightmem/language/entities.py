"""Named entities of a text: spaCy's when a pipeline is given, capitalised words otherwise."""
from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from lightmem.text import STOPWORDS

ENTITY_LABELS = frozenset({"PERSON", "ORG", "GPE", "LOC", "EVENT", "WORK_OF_ART", "PRODUCT", "NORP", "FAC"})
# Entities that anchor a key fact (query-aware pipeline §III.A): the above plus dates.
ANCHOR_LABELS = ENTITY_LABELS | {"DATE"}
_NAME = re.compile(r"\b[A-Z][a-z]+(?:\s[A-Z][a-z]+)?\b")
_NOT_NAMES = frozenset({
    "What", "When", "Where", "Who", "Why", "How", "Which", "Did", "Does", "Do", "Is", "Was", "The", "A", "An", "I",
    "Has", "Have", "Would", "Could", "Can", "Are", "Were", "In", "On", "At", "If", "My", "Yes", "No", "Hey", "Hi",
    "Oh", "Wow", "Thanks", "Thank", "That", "This", "It", "It's", "So", "And", "But", "We", "You", "He", "She", "They",
    "Sounds", "Great", "Good", "Awesome", "Sure", "Hello", "Well", "Really", "Haha", "Lol", "Also", "Just", "Not",
})


_SENTENCE_START = re.compile(r"(?:^|[.!?]\s+|\n)\W*$")


def labelled_entities(text: str, nlp: Any = None, labels: frozenset[str] = ENTITY_LABELS,
                      skip_initial: bool = False) -> list[tuple[str, str]]:
    """(entity, label) pairs; without spaCy, capitalised words labelled ``NAME``.

    ``skip_initial`` ignores capitalised words that open a sentence (in chat they are more
    often "Wow" or "Taking" than names); it applies only without spaCy.
    """
    if nlp is not None:
        return [(e.text, e.label_) for e in nlp(text).ents if e.label_ in labels]
    out = []
    for m in _NAME.finditer(text):
        first = m.group(0).split()[0]
        if first in _NOT_NAMES or first.lower() in STOPWORDS:
            continue
        if skip_initial and _SENTENCE_START.search(text[: m.start()]):
            continue
        out.append((m.group(0), "NAME"))
    return out


def entities_many(texts: Sequence[str], nlp: Any = None, labels: frozenset[str] = ANCHOR_LABELS,
                  skip_initial: bool = False) -> list[list[tuple[str, str]]]:
    """``labelled_entities`` of many texts (spaCy's ``pipe`` batches them)."""
    if nlp is None:
        return [labelled_entities(t, None, labels, skip_initial) for t in texts]
    return [[(e.text, e.label_) for e in doc.ents if e.label_ in labels] for doc in nlp.pipe(list(texts))]
