"""De-identification: personal identifiers → typed placeholders before anything reaches LTM.

LTM statements are de-identified knowledge (LightMem-SLM §3.2). By default each user's LTM is
that user's own (``LTMOptions.scope="user"``); with ``scope="shared"`` every user's searches read
every user's statements, and this module is then all that stands between one user's words and
another user's prompt. ``Deidentifier.scrub`` replaces, in this order,

- the user ids it is told about, and id-like tokens (``user_42``, UUIDs, long hex) → ``[USER]`` / ``[ID]``
- e-mail addresses → ``[EMAIL]``, URLs → ``[URL]``
- credentials: what follows "password", "passcode", "PIN", "security code"... ("is", ":") → ``[SECRET]``
- account numbers: IBANs, card numbers, and a number after "account", "card", "passport", "policy",
  "social security"... → ``[ACCOUNT_NO]``; codes mixing letters and 4+ digits ("X1234567") → ``[ID]``
- phone numbers (7+ digits) → ``[PHONE]``; other numbers of 5+ digits ("87,500") → ``[NUM]``
- street addresses ("221B Baker Street", "12 Rue de Rivoli") → ``[ADDRESS]``
- diagnoses: what follows "diagnosed with", "treated for", "suffering from"..., and phrases ending in a
  condition word ("bipolar disorder", "type 2 diabetes") → ``[DIAGNOSIS]``
- person names: the names it is told about (speakers), titled names ("Dr. Lee"), and
  spaCy ``PERSON`` entities when a pipeline is given → ``[PERSON]``
- session-specific dates: the sensory stage's ``[2023-05-07]`` annotations are removed

Measured (tests/test_ltm_privacy.py, ``DEID_CORPUS``, rules only; with spaCy's small English NER
the counts are the same: it catches one more surname, not the first name beside it). On the 18
sentences the rules were written against: names 1/3 masked (the titled one), numbers 4/4, accounts
and credentials 5/5, diagnoses 3/3, places 1/3 (the street address). On 17 sentences written apart
and not tuned on: names 1/3, numbers 2/4 (a birth date and a "locker combination" stay), accounts
3/4 ("ends in 4242" stays), diagnoses 2/4 ("has autism", "takes lithium" stay), places 0/2.

What remains, by design or by limit of rules:

- places, organisations and institutions ("Glimmerbank", "Saint Plumbus hospital", a town): they
  are the knowledge the graph is made of, and are kept;
- names nobody told it about and that carry no title: without a spaCy pipeline none are caught,
  with the small English one only those its NER tags ``PERSON`` (a first name next to a caught
  surname may stay);
- health facts not phrased with a diagnosis verb or a condition word ("my son has autism"), and
  numbers under 5 digits without a credential word before them (ages, years, card endings), dates;
- anything quasi-identifying in combination (an employer, a rare hobby, a date).

Pure apart from the optional spaCy call; the rules are deliberately conservative about
names without NER (a capitalised word may be a place), and strict about everything else.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

PERSON, EMAIL, PHONE, ADDRESS, USER, ID, URL = "[PERSON]", "[EMAIL]", "[PHONE]", "[ADDRESS]", "[USER]", "[ID]", "[URL]"
# Named so that no ordinary word is lost with them (the abstractor drops nodes named like a placeholder).
SECRET, ACCOUNT, NUMBER, DIAGNOSIS = "[SECRET]", "[ACCOUNT_NO]", "[NUM]", "[DIAGNOSIS]"
PLACEHOLDERS = (PERSON, EMAIL, PHONE, ADDRESS, USER, ID, URL, SECRET, ACCOUNT, NUMBER, DIAGNOSIS)

_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
_URL = re.compile(r"\b(?:https?://|www\.)\S+", re.I)
# +44 20 7946 0958, (555) 123-4567, 555.123.4567, 0612345678: 7+ digits with separators.
_PHONE = re.compile(r"(?<![\w/-])(?:\+\d{1,3}[\s.-]?)?(?:\(\d{1,4}\)[\s.-]?)?\d{2,4}(?:[\s.-]?\d{2,4}){1,4}(?![\w/-])")
_STREET = (
    r"street|st\.?|avenue|ave\.?|road|rd\.?|boulevard|blvd\.?|lane|ln\.?|drive|dr\.?|court|ct\.?|place|pl\.?|"
    r"square|sq\.?|terrace|way|highway|hwy\.?|parkway"
)
_ADDRESS = re.compile(
    rf"\b\d{{1,5}}[A-Za-z]?,?\s+(?:[A-Z][\w'-]*\s+){{0,3}}(?:{_STREET})\b(?:,?\s+(?:apt|apartment|suite|unit)\.?\s*\w+)?"
    r"|\b(?:\d{1,5},?\s+)?(?:rue|via|calle|avenida|straße|strasse)\s+(?:de\s+|del\s+|la\s+)?[A-Z][\w'-]*(?:\s+\d{1,5})?",
    re.I,
)
_USER_TOKEN = re.compile(r"\b(?:user|uid|usr|customer|client|account|acct)[_\-#:]?\d+\b", re.I)
_UUID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I)
_HEX_ID = re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{12,}\b", re.I)
_TITLED = re.compile(r"\b(?:Mr|Mrs|Ms|Miss|Dr|Prof|Mx)\.?\s+[A-Z][a-z]+(?:\s+[A-Z][a-z]+)?")
# "password is hunter2", "PIN: 4821", "the wifi passcode is tulip-77-moon": the label stays, the value goes.
_CREDENTIAL = re.compile(
    r"\b((?i:password|passcode|passphrase|passwd|pass code|pin code|pin number|security code|secret code|access code|"
    r"login code|safe combination)|PIN)(\s+(?i:is|was)\s+|\s*[:=]\s*)([^\s,;]+?)(?=[.,;!?]?(?:\s|$))")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?:[ ]?[A-Z0-9]{4}){2,7}(?:[ ]?[A-Z0-9]{1,3})?\b")
_CARD = re.compile(r"(?<![\w-])\d{4}(?:[ -]?\d{4}){2}[ -]?\d{1,7}(?![\w-])")
# A number after an account-like label: "account number is 12345678", "passport no. X1234567".
_ACCOUNT = re.compile(
    r"\b((?i:account|acct|iban|routing|sort code|bank card|credit card|debit card|card|passport|licen[cs]e|policy|"
    r"membership|member|social security|ssn|tax id|national id|insurance|customer)(?:\s+(?i:number|no\.?|num|#))?"
    r"(?:\s+(?i:is|was)|\s*[:#])?\s+)((?:[A-Za-z0-9][A-Za-z0-9-]*\d[A-Za-z0-9-]*)(?:[ ][A-Za-z0-9-]*\d[A-Za-z0-9-]*)*)")
_CODE = re.compile(r"\b(?=[A-Za-z0-9-]*[A-Za-z])(?=(?:[A-Za-z-]*\d){4})[A-Za-z0-9][A-Za-z0-9-]{5,}\b")
_BIG_NUMBER = re.compile(r"(?<![\w.,/-])(?:\d{1,3}(?:,\d{3})+|\d{5,})(?:\.\d+)?(?![\w/-]|[.,]\d)")
_CONDITION_WORDS = (
    r"syndrome|disease|disorder|cancer|carcinoma|leukemia|leukaemia|lymphoma|melanoma|diabetes|tumou?r|infection|"
    r"deficiency|hepatitis|HIV|AIDS|depression|anxiety|schizophrenia|dementia|alzheimer's|epilepsy|asthma|arthritis|"
    r"sclerosis|fibrosis|dystrophy|palsy|psychosis|addiction"
)
_CLAUSE_WORDS = (r"(?:i|me|my|we|you|he|she|they|it|have|has|had|a|an|the|his|her|their|our|with|from|for|of|to|and|or|"
                 r"but|is|was|were|been|being|got|get|last|at|in|on|since|when|after|because|so|which|that|who|by|"
                 r"yesterday|today|this|says|said|told)")
# "diagnosed with Frobnitz syndrome last year": the condition goes, up to a clause word or punctuation.
_PHRASE_WORD = rf"(?!(?i:{_CLAUSE_WORDS})\b)[\w'-]+"  # a word that does not start a new clause
_DIAGNOSED = re.compile(
    r"\b((?i:diagnosed with|diagnosis of|suffer(?:s|ed|ing)? from|treated for|treatment for|tested positive for|"
    rf"recovering from|in remission from|prescribed))\s+({_PHRASE_WORD}(?:\s+{_PHRASE_WORD}){{0,4}})")
_CONDITION = re.compile(rf"\b(?:{_PHRASE_WORD}\s+){{0,3}}(?i:{_CONDITION_WORDS})\b")
_DATE_NOTE = re.compile(r"\s*\[\d{4}(?:-\d{2}){0,2}(?:/\d{4}-\d{2}-\d{2})?\]")
_SPEAKER = re.compile(r"^\s*([^:\n]{1,40}):\s+")


class Deidentifier:
    """Replaces personal identifiers by placeholders.

    Args:
        nlp: Optional spaCy pipeline; its ``PERSON`` entities are replaced as well.
        names: Person names always replaced (e.g. the speakers of a user's turns).
        user_ids: User ids always replaced by ``[USER]``.
    """

    def __init__(self, nlp: Any = None, names: Iterable[str] = (), user_ids: Iterable[str] = ()) -> None:
        self.nlp = nlp
        self.names = {n.strip() for n in names if n and n.strip()}
        self.user_ids = {u for u in user_ids if u}

    def with_context(self, names: Iterable[str] = (), user_ids: Iterable[str] = ()) -> "Deidentifier":
        """A copy that also knows these names and user ids (one user's batch)."""
        return Deidentifier(self.nlp, [*self.names, *names], [*self.user_ids, *user_ids])

    def scrub(self, text: str) -> str:
        return self.scrub_many([text])[0]

    def scrub_many(self, texts: Sequence[str]) -> list[str]:
        """De-identify many texts (spaCy runs batched over the rule-scrubbed texts)."""
        out = [self._rules(t) for t in texts]
        if self.nlp is not None:
            out = [_replace_spans(t, [(e.start_char, e.end_char) for e in doc.ents if e.label_ == "PERSON"], PERSON)
                   for t, doc in zip(out, self.nlp.pipe(out))]
        return [_tidy(t) for t in out]

    def _rules(self, text: str) -> str:
        if not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}")
        t = _DATE_NOTE.sub("", text)
        # Known ids first: a user id may itself look like an e-mail or a name.
        for uid in sorted(self.user_ids, key=len, reverse=True):
            t = re.sub(rf"(?<![\w@.]){re.escape(uid)}(?![\w@])", USER, t, flags=re.I)
        t = _EMAIL.sub(EMAIL, t)
        t = _URL.sub(URL, t)
        t = _UUID.sub(ID, t)
        t = _USER_TOKEN.sub(USER, t)
        t = _HEX_ID.sub(ID, t)
        t = _CREDENTIAL.sub(lambda m: m.group(1) + m.group(2) + SECRET, t)
        t = _IBAN.sub(ACCOUNT, t)
        t = _CARD.sub(ACCOUNT, t)
        t = _ACCOUNT.sub(lambda m: m.group(1) + ACCOUNT if sum(c.isdigit() for c in m.group(2)) >= 4 else m.group(0), t)
        t = _CODE.sub(ID, t)
        t = _ADDRESS.sub(ADDRESS, t)
        t = _PHONE.sub(lambda m: PHONE if _is_phone(m.group(0)) else m.group(0), t)
        t = _BIG_NUMBER.sub(lambda m: NUMBER if sum(c.isdigit() for c in m.group(0)) >= 5 else m.group(0), t)
        t = _DIAGNOSED.sub(lambda m: m.group(1) + " " + DIAGNOSIS, t)
        t = _CONDITION.sub(DIAGNOSIS, t)
        t = _TITLED.sub(PERSON, t)
        for name in sorted(self.names, key=len, reverse=True):
            parts = [re.escape(p) for p in name.split()]
            # The full name, and each part of a multi-word name on its own ("Mel" of "Melanie"
            # is not caught; "Caroline" of "Caroline Smith" is).
            for pat in ([r"\s+".join(parts)] + (parts if len(parts) > 1 else [])):
                t = re.sub(rf"\b{pat}\b", PERSON, t, flags=re.I)
        return t


_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def _is_phone(s: str) -> bool:
    """7+ digits and not an ISO date (2023-05-07 has 8 digits and separators too)."""
    return sum(c.isdigit() for c in s) >= 7 and not _ISO_DATE.match(s.strip())


def _replace_spans(text: str, spans: list[tuple[int, int]], placeholder: str) -> str:
    for start, end in sorted(spans, reverse=True):
        if text[start:end] not in PLACEHOLDERS:
            text = text[:start] + placeholder + text[end:]
    return text


def _tidy(text: str) -> str:
    # "[PERSON] [PERSON]" (first and last name replaced apart) reads as one person; so with a diagnosis.
    text = re.sub(r"(\[PERSON\]|\[DIAGNOSIS\])(?:\s+\1)+", r"\1", text)
    return re.sub(r"\s{2,}", " ", text).strip()


def strip_speaker(text: str) -> str:
    """The body of a ``speaker: text`` memory line."""
    return _SPEAKER.sub("", text, count=1)
