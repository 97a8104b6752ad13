"""AsyncMemory: Memory's API as coroutines, off the event loop, in call order, bounded, cancellable."""
from __future__ import annotations

import asyncio
import threading
import time

import pytest

from lightmem import AsyncMemory, LightMemError, Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector


class GatedEmbedder(HashingEmbedder):
    """Encodes of memories (not of queries) wait while ``gate`` is closed; ``entered`` counts them."""

    def __init__(self) -> None:
        super().__init__(64)
        self.gate = threading.Event()
        self.gate.set()
        self.entered = 0

    def encode(self, texts, *args, **kwargs):
        if texts and all(t.startswith("user:") for t in texts):
            self.entered += 1
            assert self.gate.wait(30)
        return super().encode(texts, *args, **kwargs)


def _memory(location, embedder=None, background: bool = False) -> Memory:
    return Memory.open(location, embedder=embedder or HashingEmbedder(64), selector=Stage1Selector(),
                       background_index=background, **({} if str(location).startswith("postgresql") else {"synchronous": "NORMAL"}))


@pytest.fixture(params=["sqlite", "postgres"])
def location(request, tmp_path):
    return request.getfixturevalue("pg_uri") if request.param == "postgres" else tmp_path / "store"


@pytest.mark.parametrize("background", [True, False], ids=["background", "sync"])
def test_the_coroutines_return_what_memory_returns(location, background):
    async def run():
        async with AsyncMemory(_memory(location, background=background)) as m:
            added = await m.add([{"speaker": "Ana", "text": "I play the cello in Lisbon"}], user_id="ana")
            hits = await m.search("cello", "ana", k=1)
            ctx = await m.build_context("Where does Ana play?", "ana", budget=200)
            assert await m.flush_index()
            listed = await m.get_all("ana")
            removed = await m.delete(added[0].id, "ana")
            return added, hits, ctx, listed, removed, await m.get_all("ana")

    added, hits, ctx, listed, removed, after = asyncio.run(run())
    assert hits[0].item.id == added[0].id and added[0].text in ctx.prompt
    assert [i.id for i in listed] == [added[0].id] and removed["items"] == 1 and after == []


@pytest.mark.parametrize("background", [True, False], ids=["background", "sync"])
def test_calls_run_in_the_order_they_were_made(tmp_path, background):
    async def run():
        async with AsyncMemory(_memory(tmp_path / "s", background=background)) as m:
            texts = [f"note number {i}" for i in range(30)]
            await asyncio.gather(*(m.add(t, user_id="ana") for t in texts), m.delete_user("bob"))
            return texts, [i.text for i in await m.get_all("ana")]

    texts, stored = asyncio.run(run())
    assert stored == [f"user: {t}" for t in texts]


def test_the_event_loop_keeps_running_while_a_call_works(tmp_path):
    emb = GatedEmbedder()

    async def run():
        async with AsyncMemory(_memory(tmp_path / "s", emb)) as m:
            emb.gate.clear()
            call = asyncio.ensure_future(m.add("slow write", user_id="ana"))
            ticks, start = 0, time.perf_counter()
            while time.perf_counter() - start < 0.5:  # the loop turns while the add waits in its thread
                await asyncio.sleep(0.01)
                ticks += 1
            assert not call.done()
            emb.gate.set()
            await call
            return ticks

    assert asyncio.run(run()) >= 20


def test_a_call_cancelled_before_its_turn_never_runs_and_a_started_write_finishes(tmp_path):
    emb = GatedEmbedder()

    async def run():
        async with AsyncMemory(_memory(tmp_path / "s", emb)) as m:
            emb.gate.clear()
            started = asyncio.ensure_future(m.add("the started write", user_id="ana"))
            while emb.entered == 0:
                await asyncio.sleep(0.01)
            queued = asyncio.ensure_future(m.add("the queued write", user_id="ana"))
            await asyncio.sleep(0.05)
            queued.cancel()
            started.cancel()  # too late for the write: it finishes in its thread
            emb.gate.set()
            for task in (queued, started):
                with pytest.raises(asyncio.CancelledError):
                    await task
            return [i.text for i in await m.get_all("ana")]

    assert asyncio.run(run()) == ["user: the started write"]


def test_a_full_queue_pushes_back_in_order(tmp_path):
    emb = GatedEmbedder()

    async def run():
        async with AsyncMemory(_memory(tmp_path / "s", emb), max_pending=2) as m:
            emb.gate.clear()
            tasks = [asyncio.ensure_future(m.add(f"write {i}", user_id="ana")) for i in range(6)]
            await asyncio.sleep(0.2)
            held = (m._taken, len(m._waiters))  # two places taken, four calls waiting for one
            emb.gate.set()
            await asyncio.gather(*tasks)
            return held, [i.text for i in await m.get_all("ana")]

    held, stored = asyncio.run(run())
    assert held == (2, 4)
    assert stored == [f"user: write {i}" for i in range(6)]


def test_bad_input_raises_the_same_errors(tmp_path):
    async def run():
        async with AsyncMemory(_memory(tmp_path / "s")) as m:
            with pytest.raises(Exception) as bad:
                await m.add("", user_id="ana")
            with pytest.raises(Exception) as missing:
                await m.get("nope", "ana")
            return bad.value, missing.value

    bad, missing = asyncio.run(run())
    from lightmem import InvalidInputError, ItemNotFoundError

    assert isinstance(bad, InvalidInputError) and isinstance(missing, ItemNotFoundError)


def test_open_and_close(tmp_path):
    async def run():
        async with AsyncMemory.open(tmp_path / "s", encoder="hashing", background_index=True) as m:
            await m.add("hello there", user_id="ana")
            assert await m.flush_index(timeout=30)
        assert m.closed
        with pytest.raises(LightMemError, match="closed"):
            await m.search("hello", "ana")
        again = await AsyncMemory.open(tmp_path / "s")
        try:
            return [i.text for i in await again.get_all("ana")]
        finally:
            await again.aclose()
            await again.aclose()  # twice does nothing

    assert asyncio.run(run()) == ["user: hello there"]


def test_a_call_that_raises_stopiteration_fails_instead_of_hanging(tmp_path):
    memory = _memory(tmp_path / "s")

    def broken(*args, **kwargs):
        raise StopIteration("from deep inside")

    memory.get = broken  # an asyncio future cannot hold StopIteration; the call must still end

    async def run():
        async with AsyncMemory(memory) as m:
            with pytest.raises(RuntimeError, match="StopIteration"):
                await asyncio.wait_for(m.get("x", "ana"), timeout=30)
            return await m.get_all("ana")  # the worker goes on serving

    assert asyncio.run(run()) == []


def test_calls_cancelled_by_timeouts_raise_only_timeout_and_free_their_places(tmp_path):
    # Issue 74: a call cancelled while waiting for a place could be dropped from the queue twice and raise
    # ValueError (51 of 400 such calls); under wait_for a cancelled call raises TimeoutError, nothing else.
    async def run():
        async with AsyncMemory(_memory(tmp_path / "s"), max_pending=4) as m:
            for i in range(10):
                await m.add(f"note {i} about the cello", user_id="ana")
            outcomes: dict[str, int] = {}

            async def one(timeout: float) -> None:
                try:
                    await asyncio.wait_for(m.search("cello", "ana", k=3), timeout)
                    name = "ok"
                except BaseException as exc:  # noqa: BLE001 - counted, then asserted
                    name = type(exc).__name__
                outcomes[name] = outcomes.get(name, 0) + 1

            timeouts = [0, 0.0005, 0.001, 0.002, 0.005, 0.02]
            for round_ in range(20):
                await asyncio.gather(*(one(timeouts[(round_ + i) % len(timeouts)]) for i in range(40)))
            # cancelled directly, as a TaskGroup cancels its other tasks when one fails
            tasks = [asyncio.ensure_future(m.search("cello", "ana", k=3)) for _ in range(40)]
            await asyncio.sleep(0)
            for task in tasks[::2]:
                task.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            free = (m._taken, len(m._waiters))
            return outcomes, {type(r).__name__ for r in results}, free, await m.search("cello", "ana", k=1)

    outcomes, direct, free, last = asyncio.run(run())
    assert set(outcomes) <= {"ok", "TimeoutError"} and outcomes.get("TimeoutError")
    assert direct <= {"list", "CancelledError"} and "CancelledError" in direct
    assert free == (0, 0) and len(last) == 1  # every place came back; the memory still serves


def test_a_cancelled_aclose_still_closes_the_memory(tmp_path):
    emb = GatedEmbedder()
    memory = _memory(tmp_path / "s", emb)

    async def run():
        m = AsyncMemory(memory)
        emb.gate.clear()
        write = asyncio.ensure_future(m.add("the write before closing", user_id="ana"))
        while emb.entered == 0:
            await asyncio.sleep(0.01)
        with pytest.raises(TimeoutError):  # the closing waits behind the write
            await asyncio.wait_for(m.aclose(), 0.05)
        assert m.closed and not memory._closed
        with pytest.raises(LightMemError, match="closed"):
            await m.search("write", "ana")
        emb.gate.set()
        await write
        await asyncio.wait_for(m.aclose(), 30)  # the second aclose waits for the first closing
        assert memory._closed

    asyncio.run(run())
    assert memory._closed
    with Memory.open(tmp_path / "s", embedder=HashingEmbedder(64), selector=Stage1Selector()) as again:
        assert [i.text for i in again.get_all("ana")] == ["user: the write before closing"]


def test_an_aclose_cancelled_with_its_loop_closes_the_memory(tmp_path):
    emb = GatedEmbedder()
    memory = _memory(tmp_path / "s", emb)

    async def run():
        m = AsyncMemory(memory)
        emb.gate.clear()
        asyncio.ensure_future(m.add("a write the loop leaves behind", user_id="ana"))
        while emb.entered == 0:
            await asyncio.sleep(0.01)
        closing = asyncio.ensure_future(m.aclose())
        await asyncio.sleep(0.05)
        closing.cancel()  # as asyncio.run cancels what is left when its main coroutine ends

    asyncio.run(run())
    emb.gate.set()
    deadline = time.monotonic() + 30  # the closing runs on the worker, with no loop left to await it
    while not memory._closed and time.monotonic() < deadline:
        time.sleep(0.05)
    assert memory._closed
