"""Per-user knowledge graphs: people, places, organizations, pets, preferences and dated events.

A graph is a list of :class:`Fact` triples. Everything is drawn from a ``random.Random``
so that a seed fixes the whole dataset.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

FIRST_NAMES = {
    "f": ["Anna", "Maya", "Priya", "Sofia", "Lena", "Chloe", "Amara", "Yuki", "Elena", "Nora", "Isla", "Zara", "Leila",
          "Grace", "Hana", "Ines", "Ruth", "Mei", "Olga", "Carmen", "Fatima", "Julia", "Keiko", "Tara"],
    "m": ["Liam", "Omar", "Ravi", "Mateo", "Jonas", "Kenji", "Felix", "Tariq", "Luca", "Noah", "Ivan", "Diego", "Samir",
          "Theo", "Arjun", "Hugo", "Ben", "Malik", "Pavel", "Kofi", "Andre", "Jin", "Emil", "Rafael"],
}
CITIES = ["Lisbon", "Denver", "Osaka", "Toronto", "Nairobi", "Krakow", "Austin", "Melbourne", "Seville", "Bergen",
          "Montreal", "Porto", "Seattle", "Lyon", "Accra", "Vilnius", "Cusco", "Dublin", "Hanoi", "Tucson"]
ORG_HEADS = ["Blue Harbor", "Northwind", "Redwood", "Silverline", "Brightpath", "Cedar", "Summit", "Lumen", "Oakridge",
             "Granite", "Riverbend", "Starling", "Copperleaf", "Harbor Point", "Evergreen", "Westfield"]
ORG_TAILS = ["Analytics", "Bakery", "Clinic", "Robotics", "Studios", "Logistics", "Books", "Labs", "Architects", "Coffee Co."]
RELATIONS = ["sister", "brother", "cousin", "best friend", "coworker", "neighbor", "mentor", "roommate"]
GENDERED = {"sister": "f", "brother": "m"}
SPECIES = ["dog", "cat", "parrot", "rabbit", "turtle", "hamster"]
PET_NAMES = ["Biscuit", "Luna", "Pepper", "Mochi", "Ziggy", "Olive", "Rocket", "Nimbus", "Pickle", "Juniper", "Waffles",
             "Clover", "Bean", "Saffron"]
HOBBIES = ["pottery", "rock climbing", "birdwatching", "salsa dancing", "chess", "woodworking", "sourdough baking",
           "trail running", "knitting", "photography", "kayaking", "calligraphy", "gardening", "astronomy"]
FOODS = ["ramen", "tacos", "dumplings", "paella", "falafel", "pho", "curry", "sushi", "pierogi", "empanadas"]
EVENTS = ["jazz concert", "charity run", "pottery workshop", "film festival", "book signing", "wine tasting",
          "hackathon", "farmers market", "science fair", "art exhibition", "wedding", "job interview", "yoga retreat",
          "cooking class", "museum tour", "marathon"]
# List questions ("What outdoor activities has Ana done?"): a category, its members, and how a member is told
# without the category's own word, so that the question and its evidence share no words but the person's name.
LISTS: dict[str, tuple[list[str], list[str]]] = {
    "outdoor activities": (["hiking", "kayaking", "camping", "rock climbing", "cycling", "swimming", "surfing", "skiing"],
                           ["We went {x} over the weekend and the views were unreal.", "Spent all of Saturday {x} with a few friends.",
                            "I went {x} for the first time and I'm sore everywhere!", "Nothing beats a morning of {x}, honestly."]),
    "instruments": (["guitar", "piano", "violin", "drums", "ukulele", "cello", "saxophone"],
                    ["I've been practicing the {x} every night.", "My fingers hurt from practicing the {x} so much.",
                     "Finally got through a whole song on the {x} without a mistake!"]),
    "cities": (["Lisbon", "Denver", "Osaka", "Toronto", "Nairobi", "Krakow", "Austin", "Melbourne", "Seville", "Bergen"],
               ["Just got back from {x}, what a trip!", "The food in {x} was incredible.", "We spent four days in {x}."]),
    "dishes": (["lasagna", "banana bread", "pad thai", "shakshuka", "gumbo", "risotto", "apple pie", "kimchi stew"],
               ["Made {x} from scratch for dinner tonight.", "My homemade {x} actually turned out great.",
                "Tried a new {x} recipe and everyone wanted seconds."]),
    "sports": (["tennis", "soccer", "basketball", "volleyball", "badminton", "table tennis"],
               ["Had a great {x} match after work.", "Our {x} team finally won a game!", "I signed up for a {x} league."]),
    "books": (["The Silent Orchard", "Paper Lanterns", "A Map of Small Things", "The Glass Meridian", "Winter Bees",
               "North of Quiet"],
              ["I couldn't put down '{x}' last night.", "Just finished '{x}', that ending got me.",
               "Started '{x}' on the train this morning."]),
    "volunteering": (["a food bank", "an animal shelter", "a community garden", "a children's hospital", "a literacy program"],
                     ["I helped out at {x} on Saturday.", "Spent my morning off at {x}, it felt good to give back."]),
}
# The questions of a category: the category's word, never a member's.
LIST_QUESTIONS: dict[str, list[str]] = {
    "outdoor activities": ["What outdoor activities has {u} done?", "What activities does {u} enjoy outside?"],
    "instruments": ["What instruments does {u} play?", "Which musical instruments has {u} been learning?"],
    "cities": ["Which cities has {u} visited?", "Where has {u} traveled?"],
    "dishes": ["What dishes has {u} cooked?", "Which dishes has {u} prepared?"],
    "sports": ["What sports does {u} play?", "Which sports has {u} taken part in?"],
    "books": ["What books has {u} read?", "Which novels has {u} been reading?"],
    "volunteering": ["Where has {u} volunteered?", "At which places has {u} volunteered?"],
}


@dataclass(frozen=True)
class Fact:
    """A triple of the graph. ``obj`` is an entity name or a literal (a date for events)."""

    fid: str
    subj: str
    rel: str
    obj: str
    date: float | None = None  # Unix seconds, for dated events
    extra: tuple[tuple[str, str], ...] = ()

    def get(self, key: str) -> str | None:
        return dict(self.extra).get(key)


@dataclass
class Person:
    name: str
    gender: str
    relation: str  # to the user


@dataclass
class UserGraph:
    user: str
    gender: str
    people: list[Person]
    facts: list[Fact] = field(default_factory=list)

    def by_subject(self, subj: str, rel: str) -> Fact | None:
        return next((f for f in self.facts if f.subj == subj and f.rel == rel), None)

    def neighbours(self, entities: set[str]) -> list[Fact]:
        return [f for f in self.facts if f.subj in entities or f.obj in entities]


def make_org(rng: random.Random) -> str:
    return f"{rng.choice(ORG_HEADS)} {rng.choice(ORG_TAILS)}"


def generate_graph(rng: random.Random, user: str, gender: str, start: float, span_days: int, n_people: int = 5,
                   n_events: int = 4, n_lists: int = 0) -> UserGraph:
    """One user's world: relatives/friends with homes, jobs, pets and tastes; the user's own events; with
    ``n_lists``, that many categories of ``LISTS`` with 2-4 members each that the user did (``did`` facts)."""
    taken = {user}
    people = []
    for rel in rng.sample(RELATIONS, k=min(n_people, len(RELATIONS))):
        g = GENDERED.get(rel, rng.choice("fm"))
        name = rng.choice([n for n in FIRST_NAMES[g] if n not in taken])
        taken.add(name)
        people.append(Person(name, g, rel))
    g = UserGraph(user, gender, people)
    n = 0

    def add(subj: str, rel: str, obj: str, date: float | None = None, **extra: str) -> None:
        nonlocal n
        g.facts.append(Fact(f"f{n}", subj, rel, obj, date, tuple(sorted(extra.items()))))
        n += 1

    orgs: dict[str, str] = {}
    add(user, "works_at", make_org(rng))
    add(user, "likes", rng.choice(HOBBIES), kind="hobby")
    for p in people:
        add(user, p.relation, p.name)
        add(p.name, "lives_in", rng.choice(CITIES))
        if rng.random() < 0.8:
            org = make_org(rng)
            add(p.name, "works_at", org)
            orgs.setdefault(org, rng.choice(CITIES))
        if rng.random() < 0.5:
            add(p.name, "has_pet", rng.choice(PET_NAMES), species=rng.choice(SPECIES))
        if rng.random() < 0.6:
            add(p.name, "likes", rng.choice(FOODS + HOBBIES))
    user_org = g.facts[0].obj
    orgs.setdefault(user_org, rng.choice(CITIES))
    for org, city in orgs.items():
        add(org, "located_in", city)
    for name in rng.sample(EVENTS, k=n_events):
        when = start + rng.uniform(0, span_days) * 86400
        add(user, "attended", name, date=when, companion=rng.choice(people).name, city=rng.choice(CITIES))
    # A member that another fact of the graph names (a hobby, a city) would answer the list question from a turn
    # labelled a negative: such members are left out.
    named = {f.obj for f in g.facts} | {v for f in g.facts for _, v in f.extra}
    for category in rng.sample(sorted(LISTS), k=min(n_lists, len(LISTS))):
        members = [m for m in LISTS[category][0] if m not in named]
        for member in rng.sample(members, k=rng.randint(2, min(4, len(members)))):
            add(user, "did", member, category=category)
    return g
