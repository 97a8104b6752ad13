"""The write policies (lightmem/write_policy.py): which turns of an agent's exchange become memories, on both backends,
through Memory, HTTP, the client and MCP."""
from __future__ import annotations

import json
import typing

import pytest
from fastapi.testclient import TestClient

from lightmem.errors import InvalidInputError
from lightmem.language.exchange import content_words, is_decline, is_pleasantry, is_question_only, restates
from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.server import KeyRing, create_app
from lightmem.server.schemas import WritePolicyName
from lightmem.stores import is_server
from lightmem.types import Turn
from lightmem.write_policy import POLICIES, AgentPolicy, resolve

KEY = "alice-key-0000000001"


def _open(path, background: bool = True) -> Memory:
    """As users open it (the background indexer on), unless ``background=False``."""
    fast = {} if is_server(path) else {"synchronous": "NORMAL"}
    return Memory.open(path, embedder=HashingEmbedder(64), selector=Stage1Selector(), background_index=background, **fast)


# The shipped default (the indexer embedding after add returns) on both backends, and SQLite with it off.
@pytest.fixture(params=["sqlite", "sqlite-sync", pytest.param("postgres", marks=pytest.mark.postgres)])
def location(request, tmp_path) -> tuple[str, bool]:
    where = request.getfixturevalue("pg_uri") if request.param == "postgres" else str(tmp_path / "store")
    return where, request.param != "sqlite-sync"


@pytest.fixture
def mem(location):
    m = _open(*location)
    yield m
    m.flush_index()  # every memory written under the policy got its vector
    assert m.index_status().get("backlog", 0) == 0
    m.close()


def turn(speaker: str, text: str, i: int = 0) -> Turn:
    return Turn(f"t{i}", speaker, text, 1.7e9 + i)


# -- the text rules ----------------------------------------------------------------------------------
@pytest.mark.parametrize("text", ["What diet am I on?", "Where do I work? And since when?", "do you know where the car is parked",
                                  "Remind me what my sister's name is", "Hey! What's my dog called?"])
def test_questions_only(text):
    assert is_question_only(text)


@pytest.mark.parametrize("text", [
    "I wanted to follow up on our previous conversation about apps. You mentioned a few; which one uses mnemonics?",
    "I'm looking back at our previous chess game and I was wondering, what was your last move?",
    "Would Caroline likely have Dr. Seuss books on her bookshelf?"])
def test_talk_about_the_conversation_frames_a_question(text):
    assert is_question_only(text)


def test_declines_state_nothing_but_a_refusal_with_news_does():
    assert is_decline("I'm not sure, I don't have that noted.") and is_decline("Sorry, I can't recall that.")
    assert not is_decline("I don't have a car but I can book a taxi for 7pm.")
    assert not is_decline("I'm not sure. The museum opens at 9am on Sundays.")
    verdicts = AgentPolicy().judge([turn("user", "I moved to Lisbon last month.", 0),
                                    turn("assistant", "I'm not sure, I don't have that noted.", 1)])
    assert [v.reason for v in verdicts] == ["kept", "declines"]


@pytest.mark.parametrize("text", ["I'm vegetarian since 2019.", "I moved to Lisbon. Any good cafés?",
                                  "Remember that my sister is Ana.", "Thanks!", "Book a table for two at 7."])
def test_not_questions_only(text):
    assert not is_question_only(text)


@pytest.mark.parametrize("text", ["Thanks!", "Thank you so much, that's great!", "You're welcome! Let me know if you need "
                                  "anything else.", "Got it.", "ok", "Hi there!", "Thanks, I appreciate it!",
                                  "I'm so happy for you!"])
def test_pleasantries(text):
    assert is_pleasantry(text)


@pytest.mark.parametrize("text", ["Vegan.", "My flight is on 3 May.", "Noted: you moved to Lisbon.", "Paris!"])
def test_not_pleasantries(text):
    assert not is_pleasantry(text)


@pytest.mark.parametrize("text", [  # statements a user makes, phrased as requests or questions (review of 2026-11-29)
    "Remind me to call my mother on Sunday.", "Tell me a recipe, I'm vegan", "When I was 10 I lived in Spain",
    "How I met my wife is a long story", "Is it weird that I quit my job at Google",
    "Can you remember that my wife is allergic to nuts?", "Could you note that I'm allergic to penicillin?",
    "Would you keep in mind that I am diabetic?", "Did I mention I'm moving to Berlin next month?",
    "I live on Main St. What is nearby?", "I want to confirm my appointment is at 5pm. What should I bring?",
    "I was wondering if you could help me plan a trip to Japan in April. What should I pack?"])
def test_a_statement_asked_is_still_a_statement(text):
    assert not is_question_only(text)


@pytest.mark.parametrize("text", ["I love Paris!", "I'm so excited about Japan!", "I had a great day with Mel.",
                                  "I'm not happy.", "I need help."])
def test_feelings_and_needs_are_not_pleasantries(text):
    assert not is_pleasantry(text)


@pytest.mark.parametrize("new, stored", [
    ("I'm allergic to peanuts", "I'm not allergic to peanuts"),
    ("I work at Google", "I don't work at Google anymore, I joined a startup in Lisbon."),
    ("I have 3 cats", "I have 2 cats and 3 dogs"),
    ("My brother lives in Paris", "My sister lives in Paris and my brother in Rome"),
    ("I moved to Berlin", "I moved from Berlin to Lisbon in 2019"),
    ("The trip is in May", "The trip is in March")])
def test_a_changed_fact_is_not_a_restatement(new, stored):
    assert not restates(new, stored) and not restates(stored, new)


def test_negations_and_numbers_are_content():
    assert {"not", "vegetarian"} <= content_words("I'm not vegetarian")
    assert "2019" in content_words("since 2019")
    assert not restates("I'm not vegetarian", "user: I'm vegetarian since 2019")
    assert restates("As I said, I'm vegetarian since 2019!", "I'm vegetarian since 2019.")
    assert restates("I live in Berlin", "I live in Berlin with my sister")  # says one word less than the stored one
    assert not restates("I live in Berlin with my sister", "I live in Berlin")  # says more


def test_agent_policy_verdicts():
    turns = [turn("user", "What diet am I on?", 0), turn("assistant", "You are vegetarian.", 1),
             turn("user", "Thanks!", 2), turn("assistant", "You're welcome!", 3),
             turn("user", "I started a new job at the city library last week.", 4),
             turn("assistant", "Noted: a new job at the city library.", 5),
             turn("user", "Can you plan my Sunday?", 6),
             turn("assistant", "Sunday plan: 9am swim at the lido, 11am farmers market on Rua Augusta, 2pm museum "
                               "visit at Gulbenkian, 6pm dinner with Ana at Taberna.", 7)]
    reasons = [v.reason for v in AgentPolicy().judge(turns)]
    assert reasons == ["question", "answer", "pleasantry", "pleasantry", "kept", "restates", "question", "kept"]
    # a lone assistant turn is taken for an answer: short ones are not kept
    assert [v.keep for v in AgentPolicy().judge([turn("assistant", "It was in May.")])] == [False]


def test_policy_names_are_checked_in_one_place():
    assert resolve(None) is None and resolve("all") is None and isinstance(resolve("agent"), AgentPolicy)
    custom = AgentPolicy(min_answer_words=3)
    assert resolve(custom) is custom
    for bad in ("Agent", "none", "*", 3, object()):
        with pytest.raises(InvalidInputError, match="policy must be one of"):
            resolve(bad)
    assert set(typing.get_args(WritePolicyName)) == set(POLICIES)  # the HTTP and MCP schema name the same ones


# -- through Memory, on both backends ---------------------------------------------------------------
EXCHANGE = [{"role": "user", "content": "What diet am I on?", "id": "q1"},
            {"role": "assistant", "content": "Vegan.", "id": "a1"},
            {"role": "user", "content": "Thanks!", "id": "t1"},
            {"role": "assistant", "content": "You're welcome!", "id": "w1"}]


def test_agent_policy_writes_facts_and_keeps_every_turn(mem):
    assert [i.text for i in mem.add("I'm vegetarian since 2019.", "bob", policy="agent")] == ["user: I'm vegetarian since 2019."]
    assert mem.add(EXCHANGE, "bob", policy="agent") == []
    assert {t.turn_id for t in mem.store.turns("bob")} >= {"q1", "a1", "t1", "w1"}  # stored as turns, not memories
    assert [i.text for i in mem.get_all("bob")] == ["user: I'm vegetarian since 2019."]
    assert mem.add(EXCHANGE, "bob", policy="all") == []  # turns already stored are never written again
    assert [i.text for i in mem.add(EXCHANGE, "carol")] == [  # "all" (the default) writes every turn
        "user: What diet am I on?", "assistant: Vegan.", "user: Thanks!", "assistant: You're welcome!"]


def test_a_restatement_is_cited_by_the_stored_memory_not_written_again(mem):
    first = mem.add("I'm vegetarian since 2019.", "bob", policy="agent")[0]
    assert mem.add([{"text": "As I said, I'm vegetarian since 2019!", "id": "again"}], "bob", policy="agent") == []
    assert mem.get(first.id, "bob").provenance[-1] == "again"  # its count of sources grew
    changed = mem.add([{"text": "I'm not vegetarian anymore.", "id": "neg"}], "bob", policy="agent")
    assert [i.text for i in changed] == ["user: I'm not vegetarian anymore."]  # a negation is news, not a copy
    twice = mem.add([{"text": "My sister Ana lives in Porto.", "id": "s1"},
                     {"text": "My sister Ana lives in Porto.", "id": "s2"}], "bob", policy="agent")
    assert [i.provenance for i in twice] == [["s1", "s2"]]  # the second, in the same call, is cited by the first's memory
    assert len(mem.get_all("bob")) == 3
    assert mem.get_all("carol") == []  # another user's copy is never a match
    mem.add("I'm vegetarian since 2019.", "carol", policy="agent")
    assert len(mem.get_all("carol")) == 1


def test_erasing_the_memory_erases_the_turns_that_restated_it(mem):
    first = mem.add([{"text": "My locker code is 4471.", "id": "c1"}], "bob", policy="agent")[0]
    mem.add([{"text": "my locker code is 4471", "id": "c2"}], "bob", policy="agent")
    assert mem.get(first.id, "bob").provenance == ["c1", "c2"]
    mem.delete(first.id, "bob")
    assert not [t for t in mem.store.turns("bob") if "4471" in t.text]


def test_a_failed_write_under_the_policy_leaves_nothing(mem):
    mem.add("I'm vegetarian since 2019.", "bob", policy="agent")
    before = (len(mem.store.turns("bob")), [i.provenance for i in mem.get_all("bob")])
    with pytest.raises(InvalidInputError):  # the second message is refused before anything is written
        mem.add([{"text": "As I said, I'm vegetarian since 2019!"}, {"text": ""}], "bob", policy="agent")
    assert (len(mem.store.turns("bob")), [i.provenance for i in mem.get_all("bob")]) == before


# -- HTTP, client, MCP ------------------------------------------------------------------------------
@pytest.fixture
def http(location):
    app = create_app(lambda: _open(*location), KeyRing({KEY: ["alice"]}))
    with TestClient(app) as c:
        yield c


def _post(http, policy=None):
    body = {"user_id": "alice", "messages": [{"speaker": "user", "text": "What diet am I on?"},
                                             {"speaker": "assistant", "text": "Vegan."}]}
    if policy is not None:
        body["policy"] = policy
    return http.post("/v1/memories", headers={"Authorization": f"Bearer {KEY}"}, json=body)


@pytest.mark.parametrize("bad", ["agent\x00", "\ud800", "agent ", {"name": "agent"}, [["agent"]], "a" * 10_000])
def test_hostile_policies_are_refused_by_every_door_and_write_nothing(mem, http, bad):
    with pytest.raises(InvalidInputError, match="policy"):
        mem.add("I sail on Sundays.", "alice", policy=bad)
    body = {"user_id": "alice", "messages": [{"text": "I sail on Sundays."}], "policy": bad}
    headers = {"Authorization": f"Bearer {KEY}"}
    for path, payload in (("/v1/memories", body), ("/v1/batch", {"ops": [{"op": "add", **body}]})):
        content = json.dumps(payload).encode()  # a lone surrogate travels as its JSON escape
        r = http.post(path, headers={**headers, "Content-Type": "application/json"}, content=content)
        assert r.status_code == 422, (path, r.text)
    assert mem.get_all("alice") == []


def test_http_policy(http):
    r = _post(http, "agent")
    assert r.status_code == 201 and r.json()["items"] == []
    r = _post(http)  # "all" by default: new turn ids, both written
    assert r.status_code == 201 and len(r.json()["items"]) == 2
    for bad in ("Agent", "", 1, ["agent"]):
        r = _post(http, bad)
        assert r.status_code == 422, r.text


def test_the_client_refuses_a_policy_object_before_sending():
    from lightmem.client import MemoryClient

    with MemoryClient("http://127.0.0.1:9", KEY, timeout=1) as client, pytest.raises(InvalidInputError, match="policy"):
        client.add("x", "alice", policy=AgentPolicy())


def test_mcp_tools_write_every_message_unless_asked_for_the_agent_policy(tmp_path):
    import asyncio

    from mcp.client import Client

    from lightmem.server.mcp_server import create_mcp_server

    memory = _open(str(tmp_path / "store"))
    exchange = [{"speaker": "user", "text": "What diet am I on?"}, {"speaker": "assistant", "text": "Vegan."},
                {"speaker": "user", "text": "I run every Tuesday."}]

    async def go():
        async with Client(create_mcp_server(memory, "alice")) as c:
            agent = await c.call_tool("add_memories", {"messages": exchange, "policy": "agent"})
            every = await c.call_tool("add_memories", {"messages": exchange[:1]})
            one = await c.call_tool("add_memory", {"text": "Thanks!", "policy": "agent"})
            bad = await c.call_tool("add_memories", {"messages": exchange[:1], "policy": "some"})
            return agent, every, one, bad

    try:
        agent, every, one, bad = asyncio.run(go())
        assert [i["text"] for i in agent.structured_content["items"]] == ["user: I run every Tuesday."]
        assert len(every.structured_content["items"]) == 1  # a deliberate save: written
        assert one.structured_content["items"] == [] and bad.is_error
    finally:
        memory.close()


def test_a_turn_is_never_folded_into_a_memory_put_under_a_key(mem):
    mem.put("prefs/diet", "I am vegetarian.", "bob")  # a document the caller owns (an adapter's store puts these)
    written = mem.add([{"text": "Remember: I am vegetarian.", "id": "r"}], "bob", policy="agent")
    assert [i.provenance for i in written] == [["r"]]  # written as its own memory: deleting the document keeps it
    assert mem.get_by_key("prefs/diet", "bob").provenance != ["r"]


@pytest.mark.parametrize("atomic", [False, True])
def test_a_batch_add_takes_a_policy(mem, atomic):
    mem.add("I'm vegetarian since 2019.", "bob")
    exchange = [{"role": "user", "content": "What diet am I on?"}, {"role": "assistant", "content": "Vegan."},
                {"role": "user", "content": "As I said, I'm vegetarian since 2019!"}]
    out = mem.batch([{"op": "add", "user_id": "bob", "messages": exchange, "policy": "agent"},
                     {"op": "add", "user_id": "bob", "messages": ["Thanks!"]}], atomic=atomic)
    assert [len(r["items"]) for r in out] == [0, 1]  # "agent": nothing new; the default "all": written
    assert len(mem.get_all("bob")[0].provenance) == 2  # the restatement is cited by the stored fact
    with pytest.raises(InvalidInputError, match=r"ops\[0\] \(add\): policy must be one of"):
        mem.batch([{"op": "add", "user_id": "bob", "messages": ["I sail on Sundays."], "policy": "nope"}], atomic=atomic)
    assert len(mem.get_all("bob")) == 2  # the refused batch wrote nothing


def test_http_batch_add_takes_a_policy(http):
    ops = [{"op": "add", "user_id": "alice", "messages": [{"speaker": "user", "text": "Where do I live?"}], "policy": "agent"}]
    r = http.post("/v1/batch", headers={"Authorization": f"Bearer {KEY}"}, json={"ops": ops})
    assert r.status_code == 200 and r.json()["results"][0]["items"] == [], r.text
    r = http.post("/v1/batch", headers={"Authorization": f"Bearer {KEY}"}, json={"ops": [{**ops[0], "policy": "some"}]})
    assert r.status_code == 422
