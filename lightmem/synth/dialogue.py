"""Render a user graph into dated, multi-session dialogues (LoCoMo format).

Facts are spoken by the user to a friend, between chit-chat, with pronouns for a person
just mentioned and relative time ("yesterday", "last Saturday") for events, so a memory
system has to resolve both to answer.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

from lightmem.synth.graph import LISTS, Fact, UserGraph

CHITCHAT = [
    "Hey! How has your week been?", "Pretty busy, but good. What about you?", "Haha, that's so true.",
    "I need a vacation honestly.", "Did you sleep well? You looked tired last time.", "The weather has been awful lately.",
    "I finally finished that series we talked about.", "Oh wow, I didn't expect that!", "Same here, it's been a lot.",
    "Anyway, tell me more about you.", "I've been drinking way too much coffee.", "That reminds me, I need to call my dentist.",
]
REPLIES = ["That's great to hear!", "Oh nice, tell me more.", "No way, really?", "Good for {o}!", "How is {s} finding it?",
           "That sounds like a lot of fun.", "I'm so happy for {o}.", "Wow, I had no idea."]
RELATIVE = [(0, "This morning"), (1, "Yesterday"), (2, "Two days ago"), (3, "Three days ago"), (7, "Last week")]
PRONOUN = {"f": ("She", "her"), "m": ("He", "him")}


@dataclass
class Rendered:
    """A conversation in LoCoMo format and where each fact was said."""

    conversation: dict
    fact_turn: dict[str, str]  # fact id -> dia_id
    facts: list[Fact]  # with event dates filled in
    turn_text: dict[str, str]  # dia_id -> "[YYYY-MM-DD] Speaker: text" as a selector reads it


def locomo_date(ts: float) -> str:
    d = datetime.fromtimestamp(ts, tz=timezone.utc)
    return f"{d.hour % 12 or 12}:{d.minute:02d} {'am' if d.hour < 12 else 'pm'} on {d.day} {d.strftime('%B')}, {d.year}"


def human_date(ts: float) -> str:
    d = datetime.fromtimestamp(ts, tz=timezone.utc)
    return f"{d.day} {d.strftime('%B')} {d.year}"


def _relative(rng: random.Random, session_ts: float) -> tuple[float, str]:
    d = datetime.fromtimestamp(session_ts, tz=timezone.utc)
    if rng.random() < 0.25:  # "last Saturday": the most recent such weekday strictly before the session
        back = rng.randint(1, 6)
        day = d - timedelta(days=back)
        return day.timestamp(), f"Last {day.strftime('%A')}"
    days, phrase = rng.choice(RELATIVE)
    return (d - timedelta(days=days)).timestamp(), phrase


def _say(f: Fact, g: UserGraph, subject: str, rel_phrase: str, rng: random.Random) -> str:
    s, o = subject, f.obj
    if f.subj == g.user:
        if f.rel == "works_at":
            return rng.choice([f"Things at {o} have been hectic lately.", f"I work at {o}, and this quarter is crazy."])
        if f.rel == "likes":
            return rng.choice([f"I've been getting really into {o} lately.", f"I picked up {o} as a new hobby!"])
        if f.rel == "attended":
            return f"{rel_phrase} I went to a {o} in {f.get('city')} with {f.get('companion')}."
        if f.rel == "did":
            return rng.choice(LISTS[f.get("category") or ""][1]).format(x=o)
        return rng.choice([f"My {f.rel} {o} came over for dinner.", f"I had a long call with my {f.rel} {o}."])
    if f.rel == "lives_in":
        return rng.choice([f"{s} lives in {o} now.", f"{s} just moved to {o}.", f"{s} has settled in {o}."])
    if f.rel == "works_at":
        return rng.choice([f"{s} got a job at {o}.", f"{s} started working at {o}."])
    if f.rel == "located_in":
        return rng.choice([f"Apparently {s} is based in {o}.", f"{s} has its main office in {o}."])
    if f.rel == "has_pet":
        return f"{s} adopted a {f.get('species')} named {o}."
    if f.rel == "likes":
        return rng.choice([f"{s} is obsessed with {o}.", f"{s} really loves {o}."])
    raise ValueError(f"no template for relation {f.rel!r}")


def _order(g: UserGraph, rng: random.Random) -> list[list[Fact]]:
    """Facts grouped into chunks that are told together; a person is introduced before facts about them."""
    chunks: list[list[Fact]] = []
    people = {p.name for p in g.people}
    for p in g.people:
        intro = g.by_subject(g.user, p.relation)
        rest = [f for f in g.facts if f.subj == p.name]
        rng.shuffle(rest)
        cut = rng.randint(1, max(1, len(rest)))  # part of it told right away, the rest in a later chunk
        chunks.append([intro, *rest[:cut]])
        if rest[cut:]:
            chunks.append(rest[cut:])
    solo = [f for f in g.facts if f.subj == g.user and f.obj not in people]
    chunks.extend([f] for f in solo)
    rng.shuffle(chunks)
    # An organisation's location is told after someone's job there.
    for f in (f for f in g.facts if f.rel == "located_in"):
        at = max((i for i, ch in enumerate(chunks) if any(x.obj == f.subj for x in ch)), default=len(chunks) - 1)
        chunks.insert(rng.randint(at + 1, len(chunks)), [f])
    return chunks


def render(g: UserGraph, rng: random.Random, conv_id: str, partner: str, start: float, n_sessions: int = 6,
           chitchat: float = 0.5) -> Rendered:
    """Spread the graph's facts over ``n_sessions`` dated sessions between the user and ``partner``."""
    chunks = _order(g, rng)
    per = max(1, -(-len(chunks) // n_sessions))
    conv: dict = {"speaker_a": g.user, "speaker_b": partner}
    fact_turn: dict[str, str] = {}
    facts_out: list[Fact] = []
    turn_text: dict[str, str] = {}
    gender = {p.name: p.gender for p in g.people}
    ts = start
    for s in range(n_sessions):
        ts += rng.uniform(3, 20) * 86400
        sess_chunks = chunks[s * per : (s + 1) * per]
        if not sess_chunks:
            break
        turns: list[dict] = []

        def turn(speaker: str, text: str, s: int = s, turns: list = turns, ts: float = ts) -> str:
            dia = f"D{s + 1}:{len(turns) + 1}"
            turns.append({"speaker": speaker, "dia_id": dia, "text": text})
            turn_text[dia] = f"[{datetime.fromtimestamp(ts, tz=timezone.utc).date().isoformat()}] {speaker}: {text}"
            return dia

        turn(partner, rng.choice(CHITCHAT))
        for chunk in sess_chunks:
            last_person = None
            for f in chunk:
                if f.rel == "attended":
                    when, phrase = _relative(rng, ts)
                    f = replace(f, date=when)
                else:
                    phrase = ""
                subj = f.subj
                if f.subj in gender and f.subj == last_person and rng.random() < 0.7:
                    subj = PRONOUN[gender[f.subj]][0]
                fact_turn[f.fid] = turn(g.user, _say(f, g, subj, phrase, rng))
                facts_out.append(f)
                last_person = f.obj if f.obj in gender else (f.subj if f.subj in gender else None)
                if rng.random() < chitchat:
                    pg = gender.get(last_person or "", "f")
                    turn(partner, rng.choice(REPLIES).format(s=PRONOUN[pg][0].lower(), o=PRONOUN[pg][1]))
            if rng.random() < chitchat:
                turn(rng.choice([g.user, partner]), rng.choice(CHITCHAT))
        conv[f"session_{s + 1}"] = turns
        conv[f"session_{s + 1}_date_time"] = locomo_date(ts)
    return Rendered({"sample_id": conv_id, "conversation": conv}, fact_turn, facts_out, turn_text)
