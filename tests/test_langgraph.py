"""LangGraph over lightmem (issue 66.5): ``LightmemStore`` in a compiled ``StateGraph`` with langchain-core's fake chat
model, next to LangGraph's own ``InMemoryStore`` doing the same (the reference), and the ``build_context`` node.

The real packages, no mocks of them, no network, no LLM: the model's input is read by a callback handler.
"""
from __future__ import annotations

import asyncio
import dataclasses
import itertools
from typing import TypedDict

import pytest
from pydantic import BaseModel

pytest.importorskip("langgraph.store.base", reason="the langgraph extra: pip install 'lightmem-slm[langgraph]'")

from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.config import get_store  # noqa: E402
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402
from langgraph.store.base import BaseStore, InvalidNamespaceError, PutOp  # noqa: E402
from langgraph.store.memory import InMemoryStore  # noqa: E402

from lightmem import AsyncMemory, Memory  # noqa: E402
from lightmem.integrations.langgraph import (  # noqa: E402
    LightmemStore,
    alightmem_context,
    context_messages,
    lightmem_context,
    lightmem_model_node,
    lightmem_save_node,
    turns_of,
)

FACT = "my dog is called Rex"


def _memory(tmp_path) -> Memory:
    return Memory.open(tmp_path / "s", encoder="hashing", background_index=False)


class Capture(BaseCallbackHandler):
    """Records every prompt a chat model is called with (langchain-core's own callback)."""

    def __init__(self) -> None:
        self.prompts: list[list] = []

    def on_chat_model_start(self, serialized, messages, **kwargs) -> None:
        self.prompts.append(list(messages[0]))

    def last_text(self) -> str:
        return "\n".join(str(m.content) for m in self.prompts[-1])


def _model() -> GenericFakeChatModel:
    # a new message each call, as a real model answers (one object reused keeps the id the first run gave it)
    return GenericFakeChatModel(messages=(AIMessage("noted") for _ in itertools.count()))


def _system(found) -> SystemMessage:
    return SystemMessage("Known about the user:\n" + "\n".join(f"- {i.value['content']}" for i in found))


def _graph(model, store: BaseStore):
    """remember: a "Remember: ..." message is put under ("memories", user) (through get_store()); respond: the
    user's memories for the message, searched through the injected store, go before the messages to the model."""

    def remember(state: MessagesState, config) -> dict:
        text = state["messages"][-1].content
        if text.startswith("Remember: "):
            get_store().put(("memories", config["configurable"]["user_id"]), config["configurable"].get("key", "fact"),
                            {"content": text.removeprefix("Remember: ")})
        return {}

    def respond(state: MessagesState, config, *, store: BaseStore) -> dict:
        found = store.search(("memories", config["configurable"]["user_id"]), query=state["messages"][-1].content)
        return {"messages": [model.invoke([_system(found), *state["messages"]], config)]}

    g = StateGraph(MessagesState)
    g.add_node("remember", remember)
    g.add_node("respond", respond)
    g.add_edge(START, "remember")
    g.add_edge("remember", "respond")
    g.add_edge("respond", END)
    return g.compile(store=store)


def _agraph(model, store: BaseStore):
    """``_graph`` with coroutine nodes: the store is reached through aput and asearch."""

    async def remember(state: MessagesState, config) -> dict:
        text = state["messages"][-1].content
        if text.startswith("Remember: "):
            await get_store().aput(("memories", config["configurable"]["user_id"]), "fact",
                                   {"content": text.removeprefix("Remember: ")})
        return {}

    async def respond(state: MessagesState, config, *, store: BaseStore) -> dict:
        found = await store.asearch(("memories", config["configurable"]["user_id"]), query=state["messages"][-1].content)
        return {"messages": [await model.ainvoke([_system(found), *state["messages"]], config)]}

    g = StateGraph(MessagesState)
    g.add_node("remember", remember)
    g.add_node("respond", respond)
    g.add_edge(START, "remember")
    g.add_edge("remember", "respond")
    g.add_edge("respond", END)
    return g.compile(store=store)


def _config(user: str, capture: Capture) -> dict:
    return {"configurable": {"user_id": user}, "callbacks": [capture]}


@pytest.fixture(params=["lightmem", "reference"])
def store(request, tmp_path):
    if request.param == "reference":
        yield InMemoryStore()
        return
    memory = _memory(tmp_path)
    yield LightmemStore(memory)
    memory.close()


def test_graph_remembers_across_runs(store):
    capture, graph = Capture(), _graph(_model(), store)
    graph.invoke({"messages": [HumanMessage(f"Remember: {FACT}")]}, _config("alice", capture))
    graph.invoke({"messages": [HumanMessage("What is my dog called?")]}, _config("alice", capture))
    assert FACT in capture.last_text()  # what the first run stored is in the second run's prompt

    graph.invoke({"messages": [HumanMessage("What is my dog called?")]}, _config("bob", capture))
    assert "Rex" not in capture.last_text()  # another user's namespace returns nothing
    assert store.search(("memories", "bob")) == []
    assert store.search(("memories", "bob"), query="dog Rex") == []
    assert store.get(("memories", "bob"), "fact") is None

    item = store.get(("memories", "alice"), "fact")
    assert (item.namespace, item.key, item.value) == (("memories", "alice"), "fact", {"content": FACT})
    assert item.updated_at >= item.created_at
    store.delete(("memories", "alice"), "fact")
    assert store.get(("memories", "alice"), "fact") is None  # after a delete, get returns None
    graph.invoke({"messages": [HumanMessage("What is my dog called?")]}, _config("alice", capture))
    assert "Rex" not in capture.last_text()


@pytest.mark.parametrize("kind", ["async-memory", "sync-memory", "reference"])
def test_graph_remembers_through_ainvoke(kind, tmp_path):
    async def run() -> None:
        memory = None
        if kind == "reference":
            store = InMemoryStore()
        elif kind == "async-memory":
            memory = AsyncMemory(_memory(tmp_path))
            store = LightmemStore(memory)
        else:  # abatch runs the sync Memory's batch on a thread
            memory = _memory(tmp_path)
            store = LightmemStore(memory)
        try:
            capture, graph = Capture(), _agraph(_model(), store)
            await graph.ainvoke({"messages": [HumanMessage(f"Remember: {FACT}")]}, _config("alice", capture))
            await graph.ainvoke({"messages": [HumanMessage("What is my dog called?")]}, _config("alice", capture))
            assert FACT in capture.last_text()
            await graph.ainvoke({"messages": [HumanMessage("What is my dog called?")]}, _config("bob", capture))
            assert "Rex" not in capture.last_text()
            assert await store.asearch(("memories", "bob"), query="dog") == []
            assert (await store.aget(("memories", "alice"), "fact")).value == {"content": FACT}
            await store.adelete(("memories", "alice"), "fact")
            assert await store.aget(("memories", "alice"), "fact") is None
            await graph.ainvoke({"messages": [HumanMessage("What is my dog called?")]}, _config("alice", capture))
            assert "Rex" not in capture.last_text()
        finally:
            if isinstance(memory, AsyncMemory):
                await memory.aclose()
            elif memory is not None:
                memory.close()

    asyncio.run(run())


def _exercise(store: BaseStore) -> dict:
    """The same operations on any store; what they answer, in a form to compare."""
    docs = [(("memories", "alice"), "k1", {"content": "likes dark roast coffee", "a": 1, "tags": ["x", "y"]}),
            (("memories", "alice"), "k2", {"content": "plays the cello", "a": 3, "meta": {"lang": "en"}}),
            (("memories", "alice", "work"), "k3", {"content": "works on compilers", "a": 5, "meta": {"lang": "fr"}}),
            (("memories", "bob"), "k1", {"content": "bob swims", "a": 2, "tags": ["x"]}),
            (("notes", "alice"), "n1", {"text": "a note", "a": 9})]
    for ns, key, value in docs:
        store.put(ns, key, value)

    def keys(items) -> list:
        return [(i.namespace, i.key) for i in items]

    out: dict = {}
    out["get"] = store.get(("memories", "alice"), "k2").value
    out["missing"] = store.get(("memories", "alice"), "nope")
    out["list"] = keys(store.search(("memories", "alice")))
    out["page"] = keys(store.search(("memories", "alice"), limit=1, offset=1))
    out["all_users"] = sorted(keys(store.search(("memories",), limit=50)))
    out["everything"] = sorted(keys(store.search((), limit=50)))
    out["eq"] = sorted(keys(store.search(("memories",), filter={"a": 1})))
    out["gt"] = sorted(keys(store.search(("memories",), filter={"a": {"$gt": 1, "$lte": 3}})))
    out["ne"] = sorted(keys(store.search(("memories", "alice"), filter={"a": {"$ne": 1}})))
    out["nested"] = sorted(keys(store.search(("memories",), filter={"meta": {"lang": "fr"}})))
    out["list_value"] = sorted(keys(store.search(("memories",), filter={"tags": ["x", "y"]})))
    out["query_filter"] = sorted(keys(store.search(("memories", "alice"), query="cello", filter={"a": 3})))
    out["query_user"] = sorted(keys(store.search(("memories", "bob"), query="coffee")))
    out["namespaces"] = store.list_namespaces()
    out["ns_prefix"] = store.list_namespaces(prefix=("memories", "alice"))
    out["ns_wild"] = store.list_namespaces(prefix=("*", "alice"))
    out["ns_suffix"] = store.list_namespaces(suffix=("work",))
    out["ns_depth"] = store.list_namespaces(max_depth=1)
    out["ns_page"] = store.list_namespaces(limit=2, offset=1)
    store.put(("memories", "alice"), "k1", {"content": "likes green tea now", "a": 1})  # an update
    out["updated"] = store.get(("memories", "alice"), "k1").value
    store.batch([PutOp(("memories", "alice"), "k2", None)])  # value=None deletes
    out["deleted"] = store.get(("memories", "alice"), "k2")
    out["after_delete"] = sorted(keys(store.search(("memories", "alice"))))
    out["after_delete_query"] = sorted(keys(store.search(("memories", "alice"), query="cello")))
    return out


def test_behaves_like_the_reference(tmp_path):
    with _memory(tmp_path) as memory:
        ours = _exercise(LightmemStore(memory, all_users=True))  # the reference reads across users
    reference = _exercise(InMemoryStore())
    assert ours == reference
    assert reference["query_user"] == [(("memories", "bob"), "k1")]  # the scenario says something


def test_namespaces_refused_as_langgraph_does(store):
    for bad in [("memories", "a.b"), ("memories", "")]:
        with pytest.raises(InvalidNamespaceError):
            store.put(bad, "k", {"a": 1})
    with pytest.raises(InvalidNamespaceError):
        store.put(("langgraph", "alice"), "k", {"a": 1})
    with pytest.raises(InvalidNamespaceError):
        store.put((), "k", {"a": 1})
    with pytest.raises(NotImplementedError):
        store.put(("memories", "alice"), "k", {"a": 1}, ttl=5)


def test_too_short_namespace_and_user_index(tmp_path):
    with _memory(tmp_path) as memory:
        store = LightmemStore(memory)
        for call in (lambda: store.put(("memories",), "k", {"a": 1}), lambda: store.get(("memories",), "k"),
                     lambda: store.delete(("memories",), "k")):
            with pytest.raises(InvalidNamespaceError, match="too short to name a user"):
                call()
        flat = LightmemStore(memory, user_index=0)
        flat.put(("carol",), "k", {"content": "carol runs marathons"})
        assert flat.get(("carol",), "k").value == {"content": "carol runs marathons"}
        assert memory.users() == ["carol"]
        with pytest.raises(ValueError):
            LightmemStore(memory, user_index=-1)


def test_layout_in_lightmem(tmp_path):
    """The namespace's user is the lightmem user; the rest and the value are the memory's metadata; the text
    indexed follows LangGraph's index fields, else content/text, else JSON."""
    with _memory(tmp_path) as memory:
        store = LightmemStore(memory, index={"fields": ["title", "body.summary"]})
        store.put(("memories", "dana", "trips"), "t1", {"title": "Lisbon", "body": {"summary": "trams and tiles"}})
        store.put(("memories", "dana"), "c1", {"content": "vegetarian"})
        store.put(("memories", "dana"), "i1", {"title": "the title", "other": "the other field"}, index=["other"])
        store.put(("memories", "dana"), "j1", {"n": 1})
        texts = {m.metadata["lg_key"]: m.text for m in memory.get_all("dana")}
        assert texts == {"t1": "Lisbon\ntrams and tiles", "c1": "vegetarian", "i1": "the other field", "j1": '{"n": 1}'}
        assert LightmemStore(memory).search(("memories", "dana"), query="vegetarian")[0].key == "c1"
        trip = next(m for m in memory.get_all("dana") if m.metadata["lg_key"] == "t1")
        assert trip.metadata["lg_ns"] == {"0": "memories", "1": "dana", "2": "trips"}
        assert trip.metadata["lg_value"] == {"title": "Lisbon", "body": {"summary": "trams and tiles"}}
        hits = store.search(("memories", "dana", "trips"), query="trams")
        assert [h.key for h in hits] == ["t1"] and hits[0].score is not None

        # A long namespace and key still have one memory each (the lightmem key is then a hash).
        long_ns, long_key = ("memories", "dana", "x" * 200), "y" * 300
        store.put(long_ns, long_key, {"content": "deep"})
        assert store.get(long_ns, long_key).value == {"content": "deep"}

        # created_at stays the key's first write; updated_at moves with each put.
        first = store.get(("memories", "dana"), "c1")
        memory.clock = lambda: first.updated_at.timestamp() + 60
        store.put(("memories", "dana"), "c1", {"content": "vegan"})
        second = store.get(("memories", "dana"), "c1")
        assert second.created_at == first.created_at and second.updated_at > first.updated_at
        assert second.value == {"content": "vegan"} and len(memory.get_all("dana")) == 5


class ClientShaped:
    """``Memory``'s surface as ``lightmem.client.MemoryClient`` answers it: a hit's memory comes without its metadata
    (``get`` reads it whole), and a key holding "/" cannot be sent in a URL path."""

    def __init__(self, memory: Memory) -> None:
        self.memory = memory

    def __getattr__(self, name: str):
        return getattr(self.memory, name)

    def _key(self, key: str) -> str:
        assert "/" not in key, key
        return key

    def put(self, key, text, user_id, metadata=None):
        return self.memory.put(self._key(key), text, user_id, metadata=metadata)

    def get_by_key(self, key, user_id):
        return self.memory.get_by_key(self._key(key), user_id)

    def search(self, query, user_id, k=None, *, filters=None):
        return [dataclasses.replace(h, item=dataclasses.replace(h.item, metadata={}))
                for h in self.memory.search(query, user_id, k, filters)]


def test_over_a_client_shaped_memory(tmp_path):
    with _memory(tmp_path) as memory:
        store = LightmemStore(ClientShaped(memory))
        store.put(("memories", "hal", "team/a"), "notes/1", {"content": "the release ships on Friday"})
        hits = store.search(("memories", "hal"), query="when does the release ship?")
        assert [(h.namespace, h.key, h.value) for h in hits] == \
            [(("memories", "hal", "team/a"), "notes/1", {"content": "the release ships on Friday"})]
        assert store.get(("memories", "hal", "team/a"), "notes/1").value == {"content": "the release ships on Friday"}
        store.delete(("memories", "hal", "team/a"), "notes/1")
        assert store.get(("memories", "hal", "team/a"), "notes/1") is None
        assert store.search(("memories", "hal"), query="release") == []


def test_sync_store_over_async_memory(tmp_path):
    memory = AsyncMemory(_memory(tmp_path))
    store = LightmemStore(memory)
    store.put(("memories", "erin"), "k", {"content": "erin keeps bees"})  # no loop here: the store runs one
    assert store.get(("memories", "erin"), "k").value == {"content": "erin keeps bees"}

    async def inside_a_loop() -> None:
        with pytest.raises(RuntimeError, match="async methods"):
            store.get(("memories", "erin"), "k")
        assert (await store.aget(("memories", "erin"), "k")).value == {"content": "erin keeps bees"}
        await memory.aclose()

    asyncio.run(inside_a_loop())


def test_context_node_puts_build_context_in_the_model_call(tmp_path):
    with _memory(tmp_path) as memory:
        LightmemStore(memory).put(("memories", "fay"), "pet", {"content": "Fay's cat is named Miso"})
        memory.add("I moved to Porto last spring", user_id="fay")
        prompt = lightmem_context(memory, "fay", "What is my cat's name?", budget=600)
        assert "Miso" in prompt
        messages = context_messages([HumanMessage("What is my cat's name?")], memory, "fay")
        assert isinstance(messages[0], SystemMessage) and "Miso" in messages[0].content and len(messages) == 2
        assert context_messages([], memory, "fay") == []

        capture = Capture()
        g = StateGraph(MessagesState)
        g.add_node("model", lightmem_model_node(_model(), memory, budget=600))
        g.add_edge(START, "model")
        g.add_edge("model", END)
        graph = g.compile()
        out = graph.invoke({"messages": [HumanMessage("What is my cat's name?")]}, _config("fay", capture))
        first = capture.prompts[-1][0]
        assert isinstance(first, SystemMessage) and "Miso" in first.content
        assert out["messages"][-1].content == "noted"
        graph.invoke({"messages": [HumanMessage("What is my cat's name?")]}, _config("gus", capture))
        assert "Miso" not in capture.last_text()  # another user: no memory of fay's

    async def run() -> None:
        async with AsyncMemory.open(tmp_path / "s", encoder="hashing", background_index=False) as amemory:
            assert "Miso" in await alightmem_context(amemory, "fay", "What is my cat's name?")
            g = StateGraph(MessagesState)
            g.add_node("model", lightmem_model_node(_model(), amemory, user_id=lambda state, config: "fay"))
            g.add_edge(START, "model")
            g.add_edge("model", END)
            capture = Capture()
            await g.compile().ainvoke({"messages": [HumanMessage("What is my cat's name?")]}, {"callbacks": [capture]})
            assert "Miso" in capture.prompts[-1][0].content

    asyncio.run(run())


# -- the run's user from LangGraph 1.x's context_schema; the save node ---------------------------------------------
@dataclasses.dataclass
class DataContext:
    user_id: str


class DictContext(TypedDict):
    user_id: str


class ModelContext(BaseModel):
    user_id: str


def _chat_graph(model, memory, *, context_schema=None, save: dict | None = None, checkpointer=None):
    """START -> model (lightmem_model_node) [-> save (lightmem_save_node)] -> END."""
    g = StateGraph(MessagesState, context_schema=context_schema)
    g.add_node("model", lightmem_model_node(model, memory))
    g.add_edge(START, "model")
    if save is None:
        g.add_edge("model", END)
    else:
        g.add_node("save", lightmem_save_node(memory, **save))
        g.add_edge("model", "save")
        g.add_edge("save", END)
    return g.compile(checkpointer=checkpointer)


def _fay(memory) -> None:
    memory.add("My cat is named Miso", user_id="fay")


@pytest.mark.parametrize("schema", [DataContext, DictContext, ModelContext])
def test_model_node_reads_the_user_from_the_runs_context(schema, tmp_path):
    with _memory(tmp_path) as memory:
        _fay(memory)
        graph = _chat_graph(_model(), memory, context_schema=schema)
        ask = {"messages": [HumanMessage("What is my cat's name?")]}
        capture = Capture()
        graph.invoke(ask, {"callbacks": [capture]}, context=schema(user_id="fay"))
        assert "Miso" in capture.prompts[-1][0].content
        graph.invoke(ask, {"callbacks": [capture]}, context={"user_id": "gus"})  # a dict: coerced, or read as a mapping
        assert "Miso" not in capture.last_text()
        # the config's user as before, and both when they agree
        graph.invoke(ask, _config("fay", capture))
        assert "Miso" in capture.prompts[-1][0].content
        graph.invoke(ask, _config("fay", capture), context=schema(user_id="fay"))
        assert "Miso" in capture.prompts[-1][0].content


def test_context_and_config_users_that_disagree_are_refused(tmp_path):
    with _memory(tmp_path) as memory:
        _fay(memory)
        graph = _chat_graph(_model(), memory, context_schema=DataContext)
        capture = Capture()
        ask = {"messages": [HumanMessage("What is my cat's name?")]}
        with pytest.raises(ValueError, match="two users for one run.*'gus'.*'fay'"):
            graph.invoke(ask, _config("fay", capture), context=DataContext(user_id="gus"))
        assert capture.prompts == []  # refused before the model saw anything
        with pytest.raises(ValueError, match="no user"):
            graph.invoke(ask)
        with pytest.raises(ValueError, match="a user id is a string"):
            graph.invoke(ask, context={"user_id": 7})
        # the user id is literal: "*" is the user of that name, who has no memories
        graph.invoke(ask, {"callbacks": [capture]}, context=DataContext(user_id="*"))
        assert "Miso" not in capture.last_text()
        # an explicit user_id= is the node's, whatever the run says
        fixed = StateGraph(MessagesState, context_schema=DataContext)
        fixed.add_node("model", lightmem_model_node(_model(), memory, user_id="fay"))
        fixed.add_edge(START, "model")
        fixed.compile().invoke(ask, {"callbacks": [capture]}, context=DataContext(user_id="gus"))
        assert "Miso" in capture.prompts[-1][0].content


def _provenance(memory, user: str) -> list[str]:
    return [tid for item in memory.get_all(user) for tid in item.provenance]


def test_turns_of_keeps_the_conversation():
    messages = [SystemMessage("be brief", id="s"), HumanMessage("my dog is called Rex", id="h1"),
                AIMessage("", id="a0", tool_calls=[{"name": "lookup", "args": {}, "id": "c1"}]),
                AIMessage([{"type": "text", "text": "Noted"}, {"type": "tool_use", "id": "c2", "name": "x", "input": {}}],
                          id="a1"),
                HumanMessage("no id here")]
    turns = turns_of(messages, "t1")
    assert [(t["speaker"], t["text"], t["id"]) for t in turns[:2]] == [("user", "my dog is called Rex", "lg-h1"),
                                                                      ("assistant", "Noted", "lg-a1")]
    assert turns[2]["speaker"] == "user" and turns[2]["id"].startswith("lg-h:")
    assert turns_of(messages, "t1")[2]["id"] == turns[2]["id"]  # stable without a message id too
    assert {t["session_id"] for t in turns} == {"t1"}


def test_save_node_stores_a_thread_once_however_often_it_is_replayed(tmp_path):
    with _memory(tmp_path) as memory:
        graph = _chat_graph(_model(), memory, context_schema=DataContext, save={"policy": "all"},
                            checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "t1"}}
        ctx = DataContext(user_id="hal")
        graph.invoke({"messages": [HumanMessage("My dog is called Rex")]}, config, context=ctx)
        first = _provenance(memory, "hal")
        assert len(first) == 2  # the human message and the model's answer
        # the checkpointer hands the next run the whole thread: what is stored is not stored again
        graph.invoke({"messages": [HumanMessage("I live in Porto")]}, config, context=ctx)
        second = _provenance(memory, "hal")
        assert len(second) == 4 and len(set(second)) == 4 and second[:2] == first
        state = graph.get_state(config).values
        lightmem_save_node(memory, policy="all").invoke(state, {"configurable": {"user_id": "hal", "thread_id": "t1"}})
        assert _provenance(memory, "hal") == second
        texts = [item.text for item in memory.get_all("hal")]
        assert "user: My dog is called Rex" in texts and "assistant: noted" in texts
        assert {item.metadata.get("session_id") for item in memory.get_all("hal")} == {"t1"}  # the thread
        assert memory.get_all("ivy") == []


def test_save_node_under_the_agent_policy_keeps_facts_only(tmp_path):
    with _memory(tmp_path) as memory:
        graph = _chat_graph(_model(), memory, context_schema=DataContext, save={})  # policy="agent", the default
        ctx = DataContext(user_id="joy")
        for text in ("What's the weather like in Lisbon today?", "Thanks!", "My sister Ana is a pilot in Lisbon"):
            graph.invoke({"messages": [HumanMessage(text)]}, context=ctx)
        texts = [item.text for item in memory.get_all("joy")]
        assert any("Ana is a pilot" in t for t in texts)
        assert not any("weather" in t for t in texts)
        assert not any("Thanks" in t for t in texts)


@pytest.mark.parametrize("kind", ["async-memory", "sync-memory"])
def test_save_and_model_nodes_through_ainvoke(kind, tmp_path):
    async def run() -> None:
        memory = AsyncMemory(_memory(tmp_path)) if kind == "async-memory" else _memory(tmp_path)
        try:
            graph = _chat_graph(_model(), memory, context_schema=DataContext, save={"policy": "all"})
            capture = Capture()
            await graph.ainvoke({"messages": [HumanMessage("My dog is called Rex")]}, {"callbacks": [capture]},
                                context=DataContext(user_id="kim"))
            await graph.ainvoke({"messages": [HumanMessage("What is my dog called?")]}, {"callbacks": [capture]},
                                context=DataContext(user_id="kim"))
            assert "Rex" in capture.prompts[-1][0].content  # the first run's saved turn, in the second run's prompt
            await graph.ainvoke({"messages": [HumanMessage("What is my dog called?")]}, {"callbacks": [capture]},
                                context=DataContext(user_id="lou"))
            assert "Rex" not in capture.last_text()
            with pytest.raises(ValueError, match="two users"):
                await graph.ainvoke({"messages": [HumanMessage("hi")]}, {"configurable": {"user_id": "lou"}},
                                    context=DataContext(user_id="kim"))
            if kind == "async-memory":
                with pytest.raises(TypeError, match="ainvoke"):
                    lightmem_save_node(memory).invoke({"messages": [HumanMessage("x")]},
                                                      {"configurable": {"user_id": "kim"}})
        finally:
            if isinstance(memory, AsyncMemory):
                await memory.aclose()
            else:
                memory.close()

    asyncio.run(run())
