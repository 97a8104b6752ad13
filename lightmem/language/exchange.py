"""What an agent's exchange says, read from its text alone (pure, rule-based): the rules of the agent write policy.

An agent stores its own conversation: the user's questions, its answers, "thanks" and "you're welcome". Most of that
is not worth remembering, and some of it does harm: a stored question ranks first when it is asked again, and a
stored answer (right or wrong) comes back as if it were a fact. These functions tell the kinds apart:

- ``is_question_only``: every sentence of the text asks something ("What diet am I on?"); a text that also states
  something ("I moved to Lisbon. Any good cafés?") is not question-only.
- ``is_pleasantry``: nothing but social glue ("Thanks!", "You're welcome, happy to help!"), by
  ``language.phatic.is_chitchat`` sentence by sentence, plus the acknowledgements an assistant writes ("Got it.").
- ``is_meta`` / ``is_decline``: talk about the conversation itself ("I wanted to follow up on our previous chat.")
  frames a question and states no fact; an answer that only declines ("I'm not sure.") states nothing.
- ``content_words``: the words that carry facts, negations and numbers kept ("not", "never", "2019"), so that
  "I'm not vegetarian" never reads as a copy of "I'm vegetarian".
- ``novelty``: the share of a text's content words that none of the given texts holds.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

from lightmem.language.phatic import GLUE, is_chitchat
from lightmem.text import STOPWORDS

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")
# A sentence without its question mark still asks when it opens with a question word ("what time is it") or with an
# auxiliary before a pronoun ("do you know where ...", "can you remind me ...").
_WH = frozenset("what when where which who whom whose why how".split())
_AUX = frozenset("""is are was were do does did can could would will should shall may might have has had am""".split())
_PRONOUN = frozenset("i you we he she it they there my your this that".split())
# "Tell me ...", "Remind me ...", "Show me ..." ask for something; "Remember that I ..." states.
_ASKS_ME = re.compile(r"^(?:can you |could you |please )?(?:tell|remind|show) me\b", re.IGNORECASE)
# What an assistant says to acknowledge, beyond the user's social glue.
_ACKNOWLEDGE = frozenset(
    """got noted understood will do done welcome problem anytime help helping happy assist let know else anything
    questions question feel free ask here certainly alright okay need needs else hope helps enjoy glad""".split()
)
# Negations and quantity words carry meaning the stop list would drop.
_KEEP = frozenset({"not", "no", "never", "don't", "doesn't", "didn't", "isn't", "aren't", "wasn't", "weren't", "can't",
                   "won't", "nor", "without", "stopped", "quit", "anymore", "longer"})
# Discourse fillers: "As I said, ...", "Remember that ...", "Actually, ..." add no fact to what follows.
_FILLER = frozenset("said say says told tell mentioned already again actually really basically anyway remember just also".split())
_STOP = (STOPWORDS | _WH | _FILLER | frozenset("i'm i've i'd i'll it's that's you're we're they're let's".split())) - _KEEP
ASSISTANT_SPEAKERS = frozenset({"assistant", "ai", "bot", "model", "agent"})


# Titles whose period ends no sentence when a name follows ("Would Dr. Seuss ...?" is one question); "Main St. What
# is nearby?" stays two.
_ABBREVIATION = re.compile(r"\b(Dr|Mr|Mrs|Ms|Prof)\.(?=\s+[A-Z])")
# A question that tells something ("Did I mention I'm moving?", "Can you remember that my wife is allergic to nuts?",
# "Is it weird that I quit my job?"): it is the user's statement, asked.
_TELLS = re.compile(r"\b(?:that|mention(?:ed)?|note|keep in mind)\s+(?:i|i'm|i've|i'd|i'll|my|we|we're|we've|our)\b",
                    re.IGNORECASE)
# A first-person clause ("I love Paris", "I'm not happy", "my flight is at 9"): what a user says about themself.
_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i've|i'd|i'll|my|we|we're|we've|our)\b", re.IGNORECASE)
# The words a first-person pleasantry may hold ("Thanks, I appreciate it!", "I'm so happy for you!").
_THANKS = frozenset("""thanks thank appreciate appreciated glad welcome ok okay sure great good bye goodbye care see soon
    later talk happy nice fine cool awesome lovely pleasure means lot""".split())
_NEGATION = frozenset({"not", "no", "never", "don't", "doesn't", "didn't", "isn't", "aren't", "wasn't", "weren't", "can't",
                       "won't", "nor", "without", "anymore", "longer", "n't"})
_MONTHS = frozenset("""january february march april may june july august september october november december monday
    tuesday wednesday thursday friday saturday sunday""".split())


def sentences(text: str) -> list[str]:
    """``text`` cut into its sentences (at ., !, ? followed by space, and at line breaks; not after a title such
    as "Dr.")."""
    text = _ABBREVIATION.sub(lambda m: m.group(1), text.strip())
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def is_question(sentence: str) -> bool:
    """True when the sentence asks: it ends with a question mark, or (without a final "." or "!") opens with a
    question word, an auxiliary before a pronoun ("do you know ...") or "tell me" / "remind me"."""
    s = sentence.strip()
    if not s:
        return False
    if s.endswith("?"):
        return True
    if s.endswith(("!", ".")):
        return False
    if _ASKS_ME.match(s):  # "Remind me what my sister's name is" asks; "Tell me a recipe, I'm vegan" also tells
        return not re.search(r"\bi(?:'m| am|'ve| have| was| had)\b", s, re.IGNORECASE)
    words = _WORD.findall(s.lower())
    if len(words) < 2 or _FIRST_PERSON.search(" ".join(words[1:])):
        return False  # "When I was 10 I lived in Spain", "How I met my wife is a long story": told, not asked
    return words[0] in _WH or (words[0] in _AUX and words[1] in _PRONOUN)


# Talk about the conversation itself ("I wanted to follow up on our previous chat about X.", "You mentioned three
# apps.", "I was wondering,"): it frames a question and states no fact of the user's.
_META = re.compile(
    r"\b(?:(?:our|the|that|my) (?:previous|last|earlier|past|other) (?:conversation|chat|discussion|session|talk|exchange)"
    r"|you (?:mentioned|said|told me|recommended|suggested|gave me|provided|listed|shared|wrote)"
    r"|i (?:was|am|'m) (?:wondering|curious)|i want(?:ed)? to (?:follow up|confirm|ask|check|double-check|know)"
    r"|(?:going|looking|thinking) back (?:at|to|over|on|through))\b", re.IGNORECASE)
# An answer that declines: it states nothing ("I'm not sure, I don't have that noted.", "Sorry, I can't recall.").
_DECLINE = re.compile(
    r"^(?:sorry,? )?(?:i'?m not sure|i am not sure|i don'?t know|i do not know|i don'?t have|i do not have"
    r"|i can'?t (?:recall|remember|find|say)|i have no (?:record|information|idea)|no idea)\b", re.IGNORECASE)


def is_meta(sentence: str) -> bool:
    """True when the sentence talks about the conversation itself (``_META``) and holds no date, number or
    first-person fact beside ("I want to confirm my appointment is at 5pm" tells something)."""
    if not _META.search(sentence):
        return False
    rest = _META.sub(" ", sentence)
    words = set(_WORD.findall(rest.lower()))
    return not (words & _MONTHS or any(w.isdigit() or any(c.isdigit() for c in w) for w in words)
                or re.search(r"\bmy \w+ (?:is|are|was|were)\b|\bi(?:'m| am| have|'ve)\b", rest, re.IGNORECASE))


def is_question_only(text: str) -> bool:
    """True when every sentence of ``text`` that is neither social glue nor talk about the conversation asks
    something (and at least one does)."""
    parts = [s for s in sentences(text) if not is_chitchat(s) and not (is_meta(s) and not is_question(s))]
    return bool(parts) and all(is_question(s) and not _TELLS.search(s) for s in parts)


def is_decline(text: str) -> bool:
    """True when every sentence of ``text`` that is not social glue is a short refusal to answer ("I'm not sure.",
    at most 9 words: "I don't have a car but I can book a taxi" states something) or talk about the conversation."""
    parts = [s for s in sentences(text) if not is_chitchat(s)]
    return bool(parts) and all((_DECLINE.match(s) and len(s.split()) <= 9) or (is_meta(s) and not is_question(s))
                               for s in parts)


def is_pleasantry(text: str) -> bool:
    """True when ``text`` says nothing but greetings, thanks, praise or acknowledgement ("Thanks!", "Got it, happy
    to help!", "You're welcome."). A sentence with a negation, or in the first person with anything beyond thanks
    ("I love Paris!", "I'm not happy.", "I need help."), says something."""
    parts = sentences(text)
    if not parts:
        return True
    for s in parts:
        words = _WORD.findall(s.lower())
        if any(w in _NEGATION or w.endswith("n't") for w in words):
            return False
        if _FIRST_PERSON.search(s):
            if any(w not in STOPWORDS and w not in _THANKS and w not in ("i'm", "i've", "i'd", "i'll", "so", "really")
                   for w in words):
                return False
            continue
        if is_chitchat(s):
            continue
        if any(w not in STOPWORDS and w not in GLUE and w not in _ACKNOWLEDGE for w in words):
            return False
    return True


def content_words(text: str) -> frozenset[str]:
    """The fact-bearing words of ``text``, lower case: stop words out, negations and numbers in."""
    return frozenset(w for w in _WORD.findall(text.lower()) if w not in _STOP)


def novelty(text: str, known: Iterable[str]) -> float:
    """The share of ``text``'s content words that no text of ``known`` holds (1.0 for a text without any)."""
    words = content_words(text)
    if not words:
        return 0.0
    seen: set[str] = set()
    for k in known:
        seen |= content_words(k)
    return len(words - seen) / len(words)


def _anchors(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """A text's negations and its numbers and dates (digits, month and day names): two texts that differ in these
    say different things however many words they share."""
    words = _WORD.findall(text.lower())
    return (frozenset(w for w in words if w in _NEGATION or w.endswith("n't")),
            frozenset(w for w in words if w in _MONTHS or any(c.isdigit() for c in w)))


def restates(text: str, stored: str, overlap: float = 0.85) -> bool:
    """True when ``text`` says nothing ``stored`` does not: both hold the same negations, numbers and dates, and
    ``text``'s content words are ``stored``'s, or all but one of them (at least two), or the two share ``overlap``
    of their content words (Jaccard). "I work at Google" does not restate "I don't work at Google anymore", nor
    "I have 3 cats" "I have 2 cats and 3 dogs"."""
    a, b = content_words(text), content_words(stored)
    if not a or not b or _anchors(text) != _anchors(stored):
        return False
    if len(a) >= 2 and a <= b and len(b - a) <= 1:
        return True
    return len(a & b) / len(a | b) >= overlap


def is_assistant(speaker: str) -> bool:
    """True for the speaker names the adapters and message roles give an agent's own turns."""
    return speaker.strip().lower() in ASSISTANT_SPEAKERS
