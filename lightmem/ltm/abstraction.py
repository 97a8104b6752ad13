"""Abstraction: de-identified episodes → user-agnostic knowledge units (Algorithm 3, step 2).

A ``KnowledgeUnit`` is one statement with the Entity / Concept nodes it mentions and typed
edges between them (LightMem-SLM Table 9). Two abstractors share one protocol:

- ``ExtractiveAbstractor`` (no LLM): spaCy noun chunks and named entities become Entity
  nodes; dependency patterns give the edges: ``X is a Y`` → IsA, ``X is ADJ`` →
  HasProperty, a named entity's type and a compound noun's head → IsA, subject–verb–object
  and co-occurrence → RelatedTo, ``because`` / ``so`` clauses → Implies.
- ``GenerativeAbstractor``: the LLM runtime writes the units as JSON; a malformed answer
  falls back to the extractive units of the same episodes.

Inputs must already be de-identified; both abstractors scrub their outputs again.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from lightmem.llm import prompts
from lightmem.llm.base import LLM
from lightmem.llm.jsonio import call_json
from lightmem.ltm.deidentify import PLACEHOLDERS, Deidentifier
from lightmem.text import STOPWORDS
from lightmem.types import EdgeType, NodeKind

log = logging.getLogger(__name__)

# A named entity's type is the Concept it IsA.
LABEL_CONCEPTS = {
    "GPE": "place", "LOC": "place", "FAC": "place", "ORG": "organization", "EVENT": "event",
    "WORK_OF_ART": "creative work", "PRODUCT": "product", "NORP": "group", "LANGUAGE": "language",
}
_VAGUE = frozenset(
    "thing things stuff lot lots bit time times way ways day days one ones kind sort something anything everything "
    "nothing someone anyone everyone guts moment moments part today tomorrow yesterday week weekend month year idea "
    "ideas fun place point side other others".split()
)
# Evaluative adjectives say nothing about what a thing is: "great counselor" is a "counselor".
_FILLER_ADJ = frozenset(
    "great good nice awesome amazing cool helpful special similar whole own same real big little long new old "
    "fun lovely wonderful beautiful best better huge small entire certain such".split()
)
_PLACEHOLDER_WORDS = frozenset(p.strip("[]") for p in PLACEHOLDERS)
_CAUSE_MARKS = frozenset({"because", "since", "as"})
_EFFECT_WORDS = frozenset({"so", "therefore", "thus", "hence"})


@dataclass(frozen=True)
class NodeDraft:
    key: str  # normalised name: identity of the node in the graph
    text: str  # display name
    kind: NodeKind


@dataclass(frozen=True)
class EdgeDraft:
    src: str  # node keys
    dst: str
    type: EdgeType
    label: str = ""


@dataclass
class KnowledgeUnit:
    """One de-identified statement and the graph fragment it supports."""

    statement: str
    nodes: list[NodeDraft] = field(default_factory=list)
    edges: list[EdgeDraft] = field(default_factory=list)


class Abstractor(Protocol):
    def abstract(self, episodes: Sequence[str]) -> list[list[KnowledgeUnit]]:
        """Knowledge units of each de-identified episode text."""
        ...


def node_key(text: str) -> str:
    """Identity of a node: lower case, determiners and possessives dropped, spaces folded."""
    t = re.sub(r"[^\w\s'-]", " ", text.lower())
    t = re.sub(r"^(?:(?:the|a|an|my|your|his|her|our|their|its|this|that|these|those|some|such|any)\s+)+", "", t.strip())
    words = re.sub(r"\s+", " ", t).strip(" '-").split()
    while len(words) > 1 and words[0] in _FILLER_ADJ:
        words = words[1:]
    return " ".join(words)


def _usable(key: str) -> bool:
    words = key.split()
    return bool(words) and len(key) >= 3 and not all(w in _VAGUE for w in words) and not any(
        w.upper() in _PLACEHOLDER_WORDS for w in words) and not key.isdigit()


class ExtractiveAbstractor:
    """Knowledge units from NER and dependency patterns (no LLM).

    Args:
        nlp: A spaCy pipeline with the parser (``ModelRegistry().spacy()``); without one,
            capitalised phrases are the entities and co-occurrence the only relation.
        max_pairs: Most co-occurrence RelatedTo edges per sentence.
        min_words: Sentences shorter than this carry no fact.
    """

    def __init__(self, nlp: Any = None, max_pairs: int = 3, min_words: int = 4) -> None:
        self.nlp, self.max_pairs, self.min_words = nlp, max_pairs, min_words

    def abstract(self, episodes: Sequence[str]) -> list[list[KnowledgeUnit]]:
        if self.nlp is None:
            return [self._without_parser(t) for t in episodes]
        return [self._from_doc(doc) for doc in self.nlp.pipe(list(episodes))]

    # -- with spaCy ---------------------------------------------------------------------------
    def _from_doc(self, doc: Any) -> list[KnowledgeUnit]:
        units = []
        for sent in doc.sents:
            text = sent.text.strip()
            if text.endswith("?") or len([t for t in sent if not t.is_punct]) < self.min_words:
                continue
            unit = self._sentence(sent, text)
            if unit.nodes:
                units.append(unit)
        return units

    def _sentence(self, sent: Any, text: str) -> KnowledgeUnit:
        unit = KnowledgeUnit(statement=text)
        nodes: dict[str, NodeDraft] = {}
        of_token: dict[int, str] = {}  # token index → node key of the chunk it heads

        def add(key: str, display: str, kind: NodeKind) -> str | None:
            if not _usable(key):
                return None
            shown = display.split()[-len(key.split()):]  # the display name loses what the key dropped
            nodes.setdefault(key, NodeDraft(key, " ".join(shown), kind))
            return key

        ent_label = {}
        for ent in sent.ents:
            if ent.label_ in LABEL_CONCEPTS:
                key = add(node_key(ent.text), ent.text.strip(), NodeKind.ENTITY)
                if key:
                    ent_label[ent.root.i] = (key, ent.label_)
                    of_token[ent.root.i] = key
        for chunk in sent.noun_chunks:
            root = chunk.root
            if root.pos_ not in ("NOUN", "PROPN") or root.i in of_token:
                continue
            toks = [t for t in chunk if t.dep_ not in ("det", "poss", "predet") and t.pos_ not in ("PRON", "DET", "ADV")]
            if not toks:
                continue
            words = [t.text for t in toks[:-1]] + [toks[-1].lemma_ if toks[-1].pos_ == "NOUN" else toks[-1].text]
            display = " ".join(words)
            key = add(node_key(display), display, NodeKind.ENTITY)
            if key:
                of_token[root.i] = key
                if len(toks) >= 2 and root.pos_ == "NOUN":  # "support group" IsA "group"
                    head = add(node_key(root.lemma_), root.lemma_, NodeKind.CONCEPT)
                    if head and head != key:
                        unit.edges.append(EdgeDraft(key, head, EdgeType.IS_A))
        for _i, (key, label) in ent_label.items():
            concept = LABEL_CONCEPTS[label]
            add(concept, concept, NodeKind.CONCEPT)
            unit.edges.append(EdgeDraft(key, concept, EdgeType.IS_A))

        for tok in sent:
            subj = next((c for c in tok.children if c.dep_ in ("nsubj", "nsubjpass") and c.i in of_token), None)
            if tok.lemma_ == "be" and subj is not None:
                for c in tok.children:
                    if c.dep_ == "attr" and c.i in of_token and of_token[c.i] != of_token[subj.i]:
                        target = of_token[c.i]
                        nodes[target] = NodeDraft(target, nodes[target].text, NodeKind.CONCEPT)
                        unit.edges.append(EdgeDraft(of_token[subj.i], target, EdgeType.IS_A))
                    elif c.dep_ == "acomp" and c.pos_ == "ADJ":
                        prop = add(node_key(c.lemma_), c.lemma_, NodeKind.CONCEPT)
                        if prop:
                            unit.edges.append(EdgeDraft(of_token[subj.i], prop, EdgeType.HAS_PROPERTY))
            elif tok.pos_ == "VERB":
                objs = [c for c in tok.children if c.dep_ in ("dobj", "attr") and c.i in of_token]
                objs += [g for c in tok.children if c.dep_ == "prep" for g in c.children if g.dep_ == "pobj" and g.i in of_token]
                if subj is not None:
                    for o in objs:
                        if of_token[o.i] != of_token[subj.i]:
                            unit.edges.append(EdgeDraft(of_token[subj.i], of_token[o.i], EdgeType.RELATED_TO, tok.lemma_))
                # "I felt accepted because the group helped" : the cause clause Implies the main one.
                if tok.dep_ == "advcl" and any(c.dep_ == "mark" and c.lower_ in _CAUSE_MARKS for c in tok.children):
                    self._implies(unit, tok, tok.head, of_token)
            if tok.lower_ in _EFFECT_WORDS and tok.dep_ in ("advmod", "cc", "mark") and tok.head.pos_ in ("VERB", "AUX", "ADJ"):
                main = tok.head.head if tok.head.dep_ in ("conj", "advcl") else None
                if main is not None:
                    self._implies(unit, main, tok.head, of_token)

        linked = {(e.src, e.dst) for e in unit.edges} | {(e.dst, e.src) for e in unit.edges}
        entities = [k for k, n in nodes.items() if n.kind is NodeKind.ENTITY]
        pairs = [(a, b) for i, a in enumerate(entities) for b in entities[i + 1:] if (a, b) not in linked]
        unit.edges += [EdgeDraft(a, b, EdgeType.RELATED_TO) for a, b in pairs[: self.max_pairs]]
        unit.nodes = list(nodes.values())
        return unit

    @staticmethod
    def _implies(unit: KnowledgeUnit, cause_head: Any, effect_head: Any, of_token: dict[int, str]) -> None:
        def keys(head: Any, skip: Any = None) -> list[str]:
            out = []
            for t in head.subtree:
                if skip is not None and t.i in {s.i for s in skip.subtree}:
                    continue
                if t.i in of_token:
                    out.append(of_token[t.i])
            return out

        causes = keys(cause_head, effect_head if effect_head in cause_head.subtree else None)
        effects = keys(effect_head, cause_head if cause_head in effect_head.subtree else None)
        if causes and effects and causes[0] != effects[0]:
            unit.edges.append(EdgeDraft(causes[0], effects[0], EdgeType.IMPLIES))

    # -- without spaCy ------------------------------------------------------------------------
    def _without_parser(self, text: str) -> list[KnowledgeUnit]:
        units = []
        for sent in re.split(r"(?<=[.!])\s+", text):
            sent = sent.strip()
            if sent.endswith("?") or len(sent.split()) < self.min_words:
                continue
            keys = []
            for m in re.finditer(r"\b[A-Z][a-z]+(?:\s[A-Z][a-z]+)*\b", sent):
                words = m.group(0).split()
                while words and (words[0].lower() in STOPWORDS or words[0].lower() in _VAGUE or words[0] == "Another"):
                    words = words[1:]
                # A lone capitalised word opening the sentence is more often "Yesterday" than a name.
                if not words or (m.start() == 0 and len(words) == len(m.group(0).split()) == 1):
                    continue
                key = node_key(" ".join(words))
                if _usable(key) and key not in keys:
                    keys.append(key)
            if not keys:
                continue
            unit = KnowledgeUnit(sent, [NodeDraft(k, k, NodeKind.ENTITY) for k in keys])
            pairs = [(a, b) for i, a in enumerate(keys) for b in keys[i + 1:]]
            unit.edges = [EdgeDraft(a, b, EdgeType.RELATED_TO) for a, b in pairs[: self.max_pairs]]
            units.append(unit)
        return units


class _Node(BaseModel):
    name: str = Field(min_length=2, max_length=80)
    type: Literal["entity", "concept", "Entity", "Concept"] = "entity"


class _Edge(BaseModel):
    src: str = Field(min_length=2, max_length=80)
    type: Literal["IsA", "HasProperty", "RelatedTo", "Implies"]
    dst: str = Field(min_length=2, max_length=80)


class _Unit(BaseModel):
    statement: str = Field(min_length=3, max_length=400)
    nodes: list[_Node] = Field(default_factory=list, max_length=12)
    edges: list[_Edge] = Field(default_factory=list, max_length=16)


class ConsolidatorOutput(BaseModel):
    """The JSON the offline LLM must produce for a batch of episodes."""

    units: list[_Unit] = Field(default_factory=list, max_length=64)


class GenerativeAbstractor:
    """The LLM runtime abstracts a batch of episodes into units; malformed output → extractive.

    All of a batch's units are attached to its first episode (evidence is counted per unit,
    not per episode). Outputs are scrubbed again: the model never gets the last word on privacy.

    Args:
        llm: The LLM runtime (the large-context offline model of the paper).
        fallback: Used when the model's answer is unusable.
        deidentifier: Scrubs the model's statements and names.
        episodes_per_call: Episodes per prompt.
        max_new_tokens: Length limit of the JSON answer.
    """

    def __init__(self, llm: LLM, fallback: ExtractiveAbstractor | None = None, deidentifier: Deidentifier | None = None,
                 episodes_per_call: int = 12, max_new_tokens: int = 512) -> None:
        self.llm, self.fallback = llm, fallback or ExtractiveAbstractor()
        self.deid = deidentifier or Deidentifier()
        self.episodes_per_call, self.max_new_tokens = max(1, episodes_per_call), max_new_tokens

    def abstract(self, episodes: Sequence[str]) -> list[list[KnowledgeUnit]]:
        out: list[list[KnowledgeUnit]] = [[] for _ in episodes]
        chunks = [list(range(i, min(i + self.episodes_per_call, len(episodes)))) for i in range(0, len(episodes), self.episodes_per_call)]
        texts = [prompts.CONSOLIDATOR.format(episodes=prompts.bullet([episodes[i] for i in idx])) for idx in chunks]
        answers = call_json(self.llm, texts, ConsolidatorOutput, "consolidator", prompts.retry, self.max_new_tokens) if texts else []
        for idx, ans in zip(chunks, answers):
            units = self._units(ans) if ans is not None else None
            if not units:
                for i, us in zip(idx, self.fallback.abstract([episodes[i] for i in idx])):
                    out[i] = us
            else:
                out[idx[0]] = units
        return out

    def _units(self, ans: ConsolidatorOutput) -> list[KnowledgeUnit]:
        units = []
        for u in ans.units:
            statement = self.deid.scrub(u.statement)
            nodes: dict[str, NodeDraft] = {}
            for n in u.nodes:
                name = self.deid.scrub(n.name)
                key = node_key(name)
                if _usable(key):
                    nodes.setdefault(key, NodeDraft(key, name, NodeKind(n.type.lower())))
            edges = []
            for e in u.edges:
                a, b = node_key(self.deid.scrub(e.src)), node_key(self.deid.scrub(e.dst))
                if a in nodes and b in nodes and a != b:
                    edges.append(EdgeDraft(a, b, EdgeType(e.type)))
            if nodes:
                units.append(KnowledgeUnit(statement, list(nodes.values()), edges))
        return units


@dataclass(frozen=True)
class AbstractorChoice:
    """How ``build_ltm`` makes the abstractor ``LTMOptions.abstractor`` names."""

    build: Callable[[Any, LLM | None, Deidentifier], Any]  # (spaCy pipeline, LLM runtime, de-identifier) → abstractor
    needs_llm: bool


# The abstractors by the name a config gives (``ltm.abstractor``).
ABSTRACTORS = {
    "extractive": AbstractorChoice(lambda nlp, llm, deid: ExtractiveAbstractor(nlp), needs_llm=False),
    "generative": AbstractorChoice(lambda nlp, llm, deid: GenerativeAbstractor(llm, ExtractiveAbstractor(nlp), deid),
                                   needs_llm=True),
}
