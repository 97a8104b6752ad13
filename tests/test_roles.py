"""The three roles behind their protocols, with scripted and tiny random models."""
from __future__ import annotations

import json
import random

import pytest
from fakes import ScriptedLLM, YesNoLLM

from lightmem.llm.base import GenerationError
from lightmem.roles.complexity import HeuristicComplexity, adaptive_k
from lightmem.roles.controller import FastController, GenerativeController
from lightmem.roles.maintenance import Maintainer, slot
from lightmem.roles.selector import CrossEncoderSelector, GenerativeSelector
from lightmem.roles.writer import ExtractiveWriter, GenerativeWriter, TurnWriter
from lightmem.timeutil import parse_timestamp
from lightmem.types import Filters, Hit, HypotheticalQuery, MemoryItem, RetrievalPlan, Turn

MAY8 = parse_timestamp("1:56 pm on 8 May, 2023")  # a Monday


# -- Controller ------------------------------------------------------------------------------
def test_fast_controller_resolves_pronouns_from_stm():
    plan = FastController().plan("When did she go to the support group?", 10, Filters(),
                                 stm=["Melanie: how are you?", "Caroline: I went to a support group!"], now=MAY8)
    assert plan.hqs[0].text == "When did Caroline go to the support group?"
    assert plan.intent["personal"] and plan.intent["tags"] == ["Caroline"]


def test_fast_controller_splits_compound_questions_and_scales_k():
    plan = FastController().plan("What did Melanie paint and what did she read last week?", 10, Filters(), now=MAY8)
    texts = [h.text for h in plan.hqs]
    assert texts[0].startswith("What did Melanie paint and") and "what did Melanie read last week" in texts
    assert plan.k > 10 and plan.intent["complexity"] > 0
    start, end = plan.intent["time_window"]
    assert parse_timestamp("2023-05-01") == start and parse_timestamp("2023-05-08") == end
    hard = FastController(hard_time_filter=True, adaptive=False).plan("what did Ava do last week?", 10, Filters(), now=MAY8)
    assert hard.filters.time_from == start and hard.k == 10 and "time_window" not in hard.intent


def test_fast_controller_routes_impersonal_questions_to_ltm():
    assert FastController().plan("what is the boiling point of water", 5, Filters()).hqs[0].route.value == "ltm"
    assert FastController().plan("what is my dog's name", 5, Filters()).hqs[0].route.value == "mtm"


def test_complexity_and_adaptive_depth():
    h = HeuristicComplexity()
    assert h.score("What is Ava's dog called?") == 0.0
    assert h.score("How many times did Ava and Ben go hiking before June?", n_entities=2) > 0.5
    assert adaptive_k(10, 0.0, 1.0, 3, 20) == 10 and adaptive_k(10, 0.55, 1.0, 3, 20) == 15 and adaptive_k(10, 1.0, 2.0, 3, 20) == 20
    with pytest.raises(ValueError):
        adaptive_k(10, 1.5, 1.0, 3, 20)


def test_generative_controller_uses_valid_json_and_falls_back_otherwise():
    good = json.dumps({"intent": {"recent": True}, "hqs": [{"query": "Caroline support group date", "layer": "MTM"},
                                                            {"query": "what LGBTQ support groups do", "layer": "LTM"}],
                       "time_window": {"start": "2023-05-01", "end": "2023-05-07"}, "tags": ["support group"]})
    plan = GenerativeController(ScriptedLLM([good])).plan("When did she go?", 5, Filters(), stm=["Caroline: hi"], now=MAY8)
    assert [h.text for h in plan.hqs] == ["When did she go?", "Caroline support group date", "what LGBTQ support groups do"]
    assert [h.route.value for h in plan.hqs] == ["mtm", "mtm", "ltm"]
    assert plan.intent["time_window"][0] == parse_timestamp("2023-05-01") and "support group" in plan.intent["tags"]
    fast = FastController()
    bad = GenerativeController(ScriptedLLM(["I think she went on Tuesday."]), fallback=fast)
    assert bad.plan("When did she go?", 5, Filters(), now=MAY8) == fast.plan("When did she go?", 5, Filters(), now=MAY8)
    assert bad.llm.meter.summary()["controller"]["failures"] == 1


# -- Selector --------------------------------------------------------------------------------
def _hits(texts):
    return [Hit(MemoryItem(id=str(i), user_id="u", text=t, provenance=[str(i)], created_at=0, event_time=MAY8, last_access=0),
                {"stage1": 1.0 - i / 100}, 1.0 - i / 100) for i, t in enumerate(texts)]


PLAN = RetrievalPlan("q", (HypotheticalQuery("what does Ava bake"),), Filters(), 2)


def test_generative_selector_keeps_the_most_probable_and_survives_failures():
    texts = ["Ava: I bake sourdough", "Ben: nice weather", "Ava: also croissants", "Ben: football"]
    sel = GenerativeSelector(YesNoLLM(yes=lambda p: 0.9 if "Ava" in p.split("Memory")[1] else 0.1))
    kept = sel.select(PLAN, _hits(texts), 2)
    assert [h.item.text for h in kept] == ["Ava: I bake sourdough", "Ava: also croissants"]
    assert kept[0].scores["selector"] == pytest.approx(0.9)
    broken = GenerativeSelector(ScriptedLLM([RuntimeError("down")]))
    assert [h.item.id for h in broken.select(PLAN, _hits(texts), 2)] == ["0", "1"]  # Stage-1 order
    text_only = GenerativeSelector(ScriptedLLM(["no", "Yes.", "yes", "no"]))
    assert [h.item.id for h in text_only.select(PLAN, _hits(texts), 2)] == ["1", "2"]


@pytest.fixture(scope="module")
def tiny_cross_encoder(tiny_models):
    return tiny_models.bert("sequence", 1), tiny_models.tok


@pytest.mark.parametrize("layers, int8", [(None, False), (1, False), (None, True)])
def test_cross_encoder_selects_a_subset_with_scores(tiny_cross_encoder, layers, int8):
    import copy

    model, tok = tiny_cross_encoder
    sel = CrossEncoderSelector.from_objects(copy.deepcopy(model), tok, batch_size=3, num_layers=layers, int8=int8)
    cands = _hits([f"memory number {i}" for i in range(7)])
    plan = RetrievalPlan("q", (HypotheticalQuery("number"), HypotheticalQuery("memory")), Filters(), 3)
    kept = sel.select(plan, cands, 3)
    assert len(kept) == 3 and {h.item.id for h in kept} <= {h.item.id for h in cands}
    assert all("selector" in h.scores for h in cands)
    assert [h.scores["selector"] for h in kept] == sorted((h.scores["selector"] for h in kept), reverse=True)
    if layers:
        assert len(sel.model.bert.encoder.layer) == layers


def test_cross_encoder_checkpoint_folder_and_missing_checkpoint(tiny_cross_encoder, tmp_path):
    model, tok = tiny_cross_encoder
    model.save_pretrained(tmp_path / "ckpt")
    tok.save_pretrained(tmp_path / "ckpt")
    sel = CrossEncoderSelector(str(tmp_path / "ckpt"), device="cpu")
    assert len(sel.select(PLAN, _hits(["a b", "c d", "e f"]), 2)) == 2
    with pytest.raises(FileNotFoundError, match="make train"):
        CrossEncoderSelector(str(tmp_path / "nope"))


# -- Writer ----------------------------------------------------------------------------------
TURNS = [
    Turn("D1:1", "Caroline", "I went to a support group yesterday.", MAY8),
    Turn("D1:2", "Melanie", "Good for you! I painted my lake last week.", MAY8, caption="a lake painting"),
    Turn("D1:3", "Caroline", "hi", MAY8),
]


def test_extractive_writer_names_speakers_and_anchors_dates():
    drafts = ExtractiveWriter().write(TURNS)
    assert drafts[0].text == "Caroline: Caroline went to a support group yesterday [7 May 2023]."
    assert drafts[1].text.startswith("Melanie: Good for Caroline! Melanie painted Melanie's lake last week [the week of 1 May 2023].")
    assert drafts[1].text.endswith("[shares an image: a lake painting]")
    assert [d.provenance for d in drafts] == [["D1:1"], ["D1:2"], ["D1:3"]]
    assert ExtractiveWriter(name_speakers=False, anchor_dates=False).write(TURNS)[0].text == TurnWriter().write(TURNS)[0].text


def test_generative_writer_keeps_cited_entries_and_falls_back():
    out = json.dumps({"memories": [{"text": "Caroline attended a support group on 7 May 2023", "source_turns": ["D1:1"]},
                                   {"text": "Invented fact", "source_turns": ["D9:9"]}]})
    drafts = GenerativeWriter(ScriptedLLM([out])).write(TURNS)
    assert [(d.text, d.provenance) for d in drafts] == [("Caroline attended a support group on 7 May 2023", ["D1:1"])]
    for bad in ("not json at all", json.dumps({"memories": [{"text": "no source", "source_turns": []}]}), RuntimeError("timeout")):
        llm = ScriptedLLM([bad])
        drafts = GenerativeWriter(llm).write(TURNS)
        assert [d.provenance for d in drafts] == [["D1:1"], ["D1:2"], ["D1:3"]]  # extractive fallback: no turn lost
        assert llm.meter.summary()["writer"]["failures"] >= 1


# -- Maintenance -----------------------------------------------------------------------------
def test_slot_extraction():
    assert slot("Ava: Ava lives in Porto") == ("ava", "lives in", "porto")
    assert slot("Ava moved to Lisbon last year")[:2] == ("ava", "lives in")
    assert slot("Ava likes tea") is None


def test_maintainer_merges_duplicates_and_supersedes_conflicts(memory):
    memory.maintainer = Maintainer(dup_threshold=0.95, conflict_threshold=0.2)
    first = memory.add({"text": "Ava adopted a cat named Mochi", "id": "T1"}, user_id="u", timestamp="2023-01-01")[0]
    dup = memory.add({"text": "Ava adopted a cat named Mochi", "id": "T2"}, user_id="u", timestamp="2023-02-01")[0]
    old = memory.get(first.id, "u")
    assert old.superseded_by == dup.id and old.valid_to is not None
    assert memory.get(dup.id, "u").provenance == ["T1", "T2"]
    hits = memory.search("cat Mochi", "u", k=5)
    assert [h.item.id for h in hits if "Mochi" in h.item.text] == [dup.id]  # the superseded copy is hidden
    porto = memory.add({"text": "Ava lives in Porto", "id": "T3"}, user_id="u", timestamp="2023-03-01")[0]
    lisbon = memory.add({"text": "Ava lives in Lisbon", "id": "T4"}, user_id="u", timestamp="2023-04-01")[0]
    assert memory.get(porto.id, "u").superseded_by == lisbon.id
    assert [e.event for e in memory.history(porto.id, "u")][-1] == "UPDATE"  # marked, never deleted


# -- Fuzz: malformed role outputs never raise and never lose a turn ---------------------------
def _garbage(rng: random.Random) -> object:
    pool = [
        "", " ", "null", "[]", "{}", "{", "}", '{"memories": ', '{"memories": "x"}', '{"memories": [{"text": 5}]}',
        '{"hqs": "nope"}', '{"hqs": [{"query": ""}]}', '{"hqs": [{"query": "x", "layer": 7}]}',
        "yes", "no", "maybe", "\x00\x01", "🤖" * 50, "a" * 5000, "```json\n{\"memories\": [```",
        '{"memories": [{"text": "ok fact here", "source_turns": ["T-unknown"]}]}',
        '{"intent": {}, "hqs": [{"query": "valid hq"}], "time_window": {"start": "never", "end": "ever"}}',
        '{"intent": {"time_window": {"a": 1}, "tags": 5, "recent": "very"}, "hqs": [{"query": "valid hq"}]}',
        RuntimeError("timeout"), ValueError("bad"),
    ]
    pick = rng.choice(pool)
    if isinstance(pick, str) and rng.random() < 0.3:
        cut = rng.randrange(len(pick) + 1)
        pick = pick[:cut]
    return pick


@pytest.mark.fuzz
def test_fuzz_malformed_outputs_lose_no_turn_and_raise_nothing(memory):
    rng = random.Random(7)
    def flaky_yes(prompt: str) -> float:
        if rng.random() < 0.1:
            raise GenerationError("selector backend timed out")
        return rng.random()

    llm = YesNoLLM(yes=flaky_yes)
    script = ScriptedLLM([_garbage(rng) for _ in range(300)])
    memory.writer = GenerativeWriter(script, turns_per_call=3)
    memory.controller = GenerativeController(script)
    memory.retriever.selector = GenerativeSelector(llm)
    ids = []
    for i in range(60):
        batch = [{"speaker": rng.choice(["Ava", "Ben"]), "text": f"turn {i}-{j} about {rng.choice(['tea', 'cats', 'Lisbon'])}",
                  "id": f"T{i}-{j}"} for j in range(rng.randint(1, 4))]
        ids += [b["id"] for b in batch]
        memory.add(batch, user_id="u", timestamp=1_600_000_000 + i)
        hits = memory.search(f"what about {rng.choice(['tea', 'cats'])}?", "u", k=3)
        assert len(hits) <= 6
    stored = {t.turn_id for t in memory.store.turns("u")}
    assert stored == set(ids)
    usage = script.meter.summary()
    assert usage["writer"]["failures"] > 0 and usage["controller"]["failures"] > 0


@pytest.mark.slow
def test_generative_roles_run_on_the_packaged_smollm2(memory, smollm2_cache):
    from lightmem.llm.transformers_backend import TransformersLLM

    llm = TransformersLLM(cache_dir=str(smollm2_cache), device="cpu", max_new_tokens=48)
    memory.writer = GenerativeWriter(llm, turns_per_call=4, max_new_tokens=48)
    memory.controller = GenerativeController(llm, max_new_tokens=48)
    memory.retriever.selector = GenerativeSelector(llm)
    written = memory.add([{"speaker": t.speaker, "text": t.text, "id": t.turn_id} for t in TURNS], user_id="u", timestamp=MAY8)
    assert written and {p for w in written for p in w.provenance} <= {"D1:1", "D1:2", "D1:3"}
    hits = memory.search("When did Caroline go to the support group?", "u", k=2, now=MAY8)
    assert 1 <= len(hits) <= 2 and all("selector" in h.scores for h in hits)
    usage = memory.usage()
    assert usage["writer"]["calls"] >= 1 and usage["controller"]["calls"] >= 1 and usage["selector"]["calls"] >= 1
    assert usage["writer"]["output_tokens"] > 0


def test_generative_controller_does_not_regenerate_a_repeated_query():
    llm = ScriptedLLM(['{"hqs": [{"query": "Ava dog name"}]}'])
    ctrl = GenerativeController(llm)
    a = ctrl.plan("What is Ava's dog called?", 5, Filters(), now=MAY8)
    b = ctrl.plan("What is Ava's dog called?", 20, Filters(), now=MAY8)
    assert len(llm.prompts) == 1 and a.hqs == b.hqs and (a.k, b.k) == (5, 20)


def test_free_form_intent_cannot_override_structured_plan_keys(memory):
    out = '{"intent": {"time_window": {"a": 1}, "tags": 5, "recent": true}, "hqs": [{"query": "Ava tea"}]}'
    memory.controller = GenerativeController(ScriptedLLM([out]))
    memory.add("Ava drinks green tea", user_id="u", timestamp=MAY8)
    result = memory.retrieve("What does Ava drink?", "u", k=2, now=MAY8)
    assert result.plan.intent["recent"] is True and "time_window" not in result.plan.intent
    assert result.plan.intent.get("tags") != 5 and result.hits
