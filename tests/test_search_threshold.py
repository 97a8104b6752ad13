"""``search(..., threshold=)``: only hits scoring above it, in every door (Memory, AsyncMemory, HTTP, MCP, the
clients); without one (the default) the best k whatever they score; 0 drops the hits without any evidence for the
query; bad values are refused."""
from __future__ import annotations

import asyncio
import json
import math
import re
from fractions import Fraction

import numpy as np
import pytest
from conftest import ROOT
from fastapi.testclient import TestClient

from lightmem.async_memory import AsyncMemory
from lightmem.client import AsyncMemoryClient, MemoryClient, _search
from lightmem.errors import InvalidInputError
from lightmem.memory import Memory
from lightmem.models.tokens import WhitespaceTokenCounter
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.server import KeyRing, create_app, launch
from lightmem.server.mcp_server import create_mcp_server
from lightmem.validation import check_threshold

ALICE = "alice-key-0000000001"
KEYS = {ALICE: ["alice"]}


class Axes:
    """Each word of a small vocabulary is a signed axis (a cat points away from a dog); a text with none of them gets
    a zero vector, as a memory has before its vector is written: cosine 0 with every query."""

    name, dim = "axes-4", 4
    VOCAB = {"dog": (0, 1.0), "puppy": (0, 1.0), "cat": (0, -1.0), "lisbon": (1, 1.0), "park": (2, 1.0)}

    def encode(self, texts, *, is_query=False):
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                if word in self.VOCAB:
                    axis, sign = self.VOCAB[word]
                    out[i, axis] += sign
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        np.divide(out, norms, out=out, where=norms > 0)
        return out

    def token_counter(self):
        return WhitespaceTokenCounter()


# The query "dog" against each memory: cosine + 0.5 x BM25 over the best match's (default weighted fusion).
TEXTS = {
    "dog": "My dog Rex chased a ball",            # cosine 1, and the query's word: 1.5
    "puppy": "Our puppy loves the park",          # cosine 0.71, no shared word: 0.71
    "lisbon": "We moved to Lisbon in May",        # orthogonal, no shared word: 0.0
    "weather": "The weather report said rain",    # no vector (zero), no shared word: 0.0
    "cat": "The cat from next door hisses",       # pointing away: -1.0
}
EXPECTED = {"dog": 1.5, "puppy": math.sqrt(0.5), "lisbon": 0.0, "weather": 0.0, "cat": -1.0}


def _open(path, **options) -> Memory:
    return Memory.open(path, embedder=Axes(), selector=options.pop("selector", Stage1Selector()), synchronous="NORMAL",
                       background_index=False, **options)


def _fill(memory, user="alice") -> dict[str, str]:
    """The memories of TEXTS for ``user``; returns each one's id by name."""
    return {name: memory.add({"speaker": "Alice", "text": text}, user_id=user)[0].id for name, text in TEXTS.items()}


def _names(hits, ids) -> list[str]:
    by_id = {v: k for k, v in ids.items()}
    return [by_id[h.item.id] for h in hits]


@pytest.fixture
def mem(tmp_path):
    with _open(tmp_path / "store") as memory:
        yield memory


def test_scores_are_stage1_fused_evidence(mem):
    ids = _fill(mem)
    hits = mem.search("dog", "alice", k=10, threshold=None)
    assert {n: h.score for n, h in zip(_names(hits, ids), hits)} == pytest.approx(EXPECTED, abs=1e-6)
    assert all(h.score == pytest.approx(h.scores["stage1"]) for h in hits)
    assert mem.retriever.score_range() == (-1.0, 1.6)


def test_no_threshold_by_default_and_0_drops_the_hits_without_evidence(mem):
    ids = _fill(mem)
    assert len(mem.search("dog", "alice", k=10)) == 5  # no filter: the best k, whatever they score
    assert len(mem.search("dog", "alice", k=10, threshold=None)) == 5
    assert _names(mem.search("dog", "alice", k=10, threshold=0.0), ids) == ["dog", "puppy"]
    assert _names(mem.search("dog", "alice", k=10, threshold=0), ids) == ["dog", "puppy"]
    assert _names(mem.search("dog", "alice", k=10, threshold=0.8), ids) == ["dog"]
    assert set(_names(mem.search("dog", "alice", k=10, threshold=-0.5), ids)) == {"dog", "puppy", "lisbon", "weather"}
    assert _names(mem.search("dog", "alice", k=1, threshold=0), ids) == ["dog"]
    assert mem.search("dog", "alice", threshold=1.6) == []  # nothing scores above the top of the range
    assert mem.search("Lisbon", "alice", threshold=1.5) == []
    # a budget's packed set is filtered too; the workings keep every Stage-1 candidate
    assert _names(mem.search("dog", "alice", budget=1000, threshold=0), ids) == ["dog", "puppy"]
    assert len(mem.search("dog", "alice", budget=1000)) == 5
    result = mem.retrieve("dog", "alice", k=10, threshold=0)
    assert len(result.hits) == 2 and len(result.candidates) == 5


def test_build_context_is_filled_by_its_budget_not_by_score(mem):
    ids = _fill(mem)
    ctx = mem.build_context("dog", "alice", budget=2000)
    assert {m.id for m in ctx.memories} == set(ids.values())


class Reversed:
    """A Stage 2 that ranks the pool worst first, and records how many it was asked for."""

    def __init__(self) -> None:
        self.asked: list[tuple[int, int]] = []

    def select(self, plan, candidates, k):
        self.asked.append((len(candidates), k))
        return sorted(candidates, key=lambda h: h.score)[:k]


def test_hits_are_stage2_s_best_among_those_above_the_threshold(tmp_path):
    selector = Reversed()
    with _open(tmp_path / "store", selector=selector) as memory:
        ids = _fill(memory)
        # Stage 2 ranks the whole pool (its features compare candidates), then the first k that pass are kept
        assert _names(memory.search("dog", "alice", k=1, threshold=0), ids) == ["puppy"]
        assert selector.asked[-1] == (5, 5)
        assert _names(memory.search("dog", "alice", k=2, threshold=0), ids) == ["puppy", "dog"]
        # no threshold, or nothing to drop: asked for k
        assert _names(memory.search("dog", "alice", k=2), ids)[0] == "cat"
        assert selector.asked[-1] == (5, 2)
        memory.add({"speaker": "Bob", "text": "my dog sleeps"}, user_id="bob")
        assert len(memory.search("dog", "bob", k=2, threshold=0)) == 1 and selector.asked[-1] == (1, 2)


@pytest.mark.parametrize("bad", [True, False, "0.5", b"0", [0.5], float("nan"), math.inf, -math.inf, 10**400, 1.61, -1.01,
                                 np.bool_(True)])
def test_bad_thresholds_are_refused_before_searching(mem, bad):
    with pytest.raises(InvalidInputError, match="threshold"):
        mem.search("dog", "alice", threshold=bad)
    with pytest.raises(InvalidInputError, match="threshold"):
        mem.retrieve("dog", "alice", threshold=bad)


def test_check_threshold():
    assert check_threshold(None, -1, 1) is None
    assert check_threshold(0, -1, 1) == 0.0 and type(check_threshold(0, -1, 1)) is float
    assert check_threshold(np.float32(0.5), -1, 1) == 0.5 and check_threshold(Fraction(1, 4), -1, 1) == 0.25
    assert check_threshold(-1, -1, 1) == -1.0 and check_threshold(1, -1, 1) == 1.0  # the range's ends are in it
    with pytest.raises(InvalidInputError, match=r"within the range of this memory's scores, -1 to 1\b"):
        check_threshold(1.5, -1, 1)
    with pytest.raises(InvalidInputError, match="finite number"):
        check_threshold(Fraction(10**400, 3), -math.inf, math.inf)


def test_the_range_follows_the_retrieval_settings(tmp_path):
    with _open(tmp_path / "rrf", retrieval={"fusion": "rrf"}) as rrf:
        low, high = rrf.retriever.score_range()
        assert low == 0.0 and high == pytest.approx(1.6 / 61)
        _fill(rrf)
        assert len(rrf.search("dog", "alice", k=10)) == 5  # every RRF candidate was ranked by a signal: above 0
        with pytest.raises(InvalidInputError, match=r"0 to 0\.026"):
            rrf.search("dog", "alice", threshold=0.3)
    with _open(tmp_path / "heavy", retrieval={"w_dense": 2.0, "w_lexical": 1.0, "w_meta": 0.0}) as heavy:
        assert heavy.retriever.score_range() == (-2.0, 3.0)
        _fill(heavy)
        assert [h.score for h in heavy.search("dog", "alice", threshold=2.5)] == pytest.approx([3.0])


def test_async_memory(mem):
    ids = _fill(mem)

    async def main():
        async_memory = AsyncMemory(mem)
        try:
            everything = await async_memory.search("dog", "alice", k=10)
            evidence = await async_memory.search("dog", "alice", k=10, threshold=0)
            result = await async_memory.retrieve("dog", "alice", k=10, threshold=0.8)
            with pytest.raises(InvalidInputError, match="threshold"):
                await async_memory.search("dog", "alice", threshold=float("nan"))
            return evidence, everything, result
        finally:
            await async_memory.aclose()

    evidence, everything, result = asyncio.run(main())
    assert _names(evidence, ids) == ["dog", "puppy"] and len(everything) == 5 and _names(result.hits, ids) == ["dog"]


# -- HTTP ---------------------------------------------------------------------------------------
@pytest.fixture
def http(tmp_path):
    app = create_app(lambda: _open(tmp_path / "store"), KeyRing(KEYS))
    with TestClient(app) as client:
        r = client.post("/v1/memories", headers={"Authorization": f"Bearer {ALICE}"},
                        json={"user_id": "alice", "messages": [{"speaker": "Alice", "text": t} for t in TEXTS.values()]})
        assert r.status_code == 201, r.text
        yield client


def _post(client, **body):
    return client.post("/v1/search", headers={"Authorization": f"Bearer {ALICE}"},
                       json={"user_id": "alice", "query": "dog", "k": 10, **body})


def test_http_search_threshold(http):
    scores = lambda r: [h["score"] for h in r.json()["hits"]]  # noqa: E731
    everything = [-1.0, 0.0, 0.0, math.sqrt(0.5), 1.5]
    assert sorted(scores(_post(http))) == pytest.approx(everything)
    assert sorted(scores(_post(http, threshold=None))) == pytest.approx(everything)
    assert scores(_post(http, threshold=0)) == pytest.approx([1.5, math.sqrt(0.5)])
    assert scores(_post(http, threshold=0.0)) == pytest.approx([1.5, math.sqrt(0.5)])
    assert scores(_post(http, threshold=0.8)) == pytest.approx([1.5])
    assert _post(http, threshold=1.6).json()["hits"] == []


@pytest.mark.parametrize("bad", [True, "0.5", [0.5], {"min": 0.5}, 1.7, -2, 1e300])
def test_http_refuses_a_bad_threshold_with_422(http, bad):
    r = _post(http, threshold=bad)
    assert r.status_code == 422, r.text
    assert "threshold" in r.json()["message"]


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_http_refuses_what_is_no_finite_number(http, token):
    r = http.post("/v1/search", headers={"Authorization": f"Bearer {ALICE}", "Content-Type": "application/json"},
                  content=f'{{"user_id": "alice", "query": "dog", "threshold": {token}}}')
    assert r.status_code == 422, r.text
    assert "threshold" in r.json()["message"]


def test_the_openapi_schema_documents_the_threshold(http):
    schema = http.get("/openapi.json").json()["components"]["schemas"]["SearchRequest"]["properties"]["threshold"]
    assert schema.get("default") is None  # no filter unless asked
    assert {t.get("type") for t in schema["anyOf"]} == {"number", "null"}
    assert "score" in schema["description"] and "-1 to 1.6" in schema["description"]


# -- MCP ----------------------------------------------------------------------------------------
def _mcp(server, calls):
    from mcp.client import Client

    async def go():
        async with Client(server) as client:
            return await calls(client)

    return asyncio.run(go())


def test_mcp_search_memories_threshold(mem):
    _fill(mem)
    server = create_mcp_server(mem, "alice")

    async def calls(c):
        tool = next(t for t in (await c.list_tools()).tools if t.name == "search_memories")
        out = [tool.input_schema["properties"]["threshold"]]
        for args in ({"threshold": 0}, {}, {"threshold": 0.8}, {"threshold": "high"}, {"threshold": True},
                     {"threshold": 5}):
            out.append(await c.call_tool("search_memories", {"query": "dog", "k": 10, **args}))
        return out

    schema, evidence, everything, high, *bad = _mcp(server, calls)
    assert schema.get("default") is None and "score" in schema["description"] and "422" not in schema["description"]
    scores = lambda r: [h["score"] for h in r.structured_content["hits"]]  # noqa: E731
    assert not any(r.is_error for r in (evidence, everything, high))
    assert scores(evidence) == pytest.approx([1.5, math.sqrt(0.5)]) and len(scores(everything)) == 5
    assert scores(high) == pytest.approx([1.5])
    assert all(r.is_error for r in bad)
    assert "range of this memory's scores" in bad[-1].content[0].text


# -- the clients --------------------------------------------------------------------------------
def test_the_client_sends_a_threshold_only_when_there_is_one():
    def body(**kwargs):
        return next(_search("dog", "alice", None, None, None, **kwargs)).body

    assert "threshold" not in body(threshold=None)  # a server that predates the field answers as before
    assert body(threshold=0)["threshold"] == 0.0 and body(threshold=0.0)["threshold"] == 0.0
    assert body(threshold=np.float64(0.25))["threshold"] == 0.25 and body(threshold=-0.5)["threshold"] == -0.5
    assert json.dumps(body(threshold=np.float32(0.5)))  # a numpy number travels as a JSON number
    for bad in (True, False, "0.5", float("nan"), math.inf):
        with pytest.raises(InvalidInputError, match="threshold"):  # before any request
            body(threshold=bad)


@pytest.mark.multiprocess
def test_the_clients_filter_as_memory_does(tmp_path):
    store = tmp_path / "store"
    with Memory.open(store, encoder="hashing", selector=Stage1Selector(), background_index=False) as local:
        for text in TEXTS.values():
            local.add({"speaker": "Alice", "text": text}, user_id="alice")
        reference = {t: local.search("dog", "alice", k=10, threshold=t) for t in (None, 0.0, 0.3)}
        with pytest.raises(InvalidInputError, match="range"):
            local.search("dog", "alice", threshold=5.0)
    assert any(h.score <= 0 for h in reference[None]) and 0 < len(reference[0.0]) < len(reference[None])
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps(KEYS))
    proc, base = launch.start(store, keys, tmp_path / "server.log", ["--workers", "1", "--selector", "none"],
                              timeout=60, cwd=ROOT)
    try:
        pairs = lambda hits: [(h.item.id, round(h.score, 6)) for h in hits]  # noqa: E731
        with MemoryClient(base, ALICE) as client:
            assert pairs(client.search("dog", "alice", k=10)) == pairs(reference[None])
            for t in (0.0, 0.3):
                assert pairs(client.search("dog", "alice", k=10, threshold=t)) == pairs(reference[t])
            with pytest.raises(InvalidInputError, match="range of this memory's scores") as refused:
                client.search("dog", "alice", threshold=5.0)
            assert refused.value.status_code == 422

        async def main():
            async with AsyncMemoryClient(base, ALICE) as client:
                return [await client.search("dog", "alice", k=10, threshold=t) for t in (0.0, None)]

        evidence, everything = asyncio.run(main())
        assert pairs(evidence) == pairs(reference[0.0]) and pairs(everything) == pairs(reference[None])
    finally:
        launch.stop(proc)
