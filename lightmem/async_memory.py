"""``AsyncMemory``: ``Memory``'s API as coroutines, for agents written with asyncio.

A ``Memory`` call is CPU work (encoders, the ranker, SQLite) that would stall an event loop for its whole length.
``AsyncMemory`` owns one ``Memory`` and runs every call on one worker thread of its own, in the order the calls
were made, so the loop keeps serving while the work runs:

- **Order.** Calls run one at a time, first made first run: an ``add`` followed by a ``search`` of the same user
  sees what was added, as in synchronous code. (One thread is also what ``Memory`` asks of its callers: the HTTP and
  MCP servers call it one call at a time too.)
- **Back-pressure.** At most ``max_pending`` calls wait or run at once; a further call waits (in call order) for a
  free place instead of growing a queue without limit.
- **Cancellation.** A call cancelled before its turn never runs. A call that has started finishes in its thread
  (a write commits or rolls back whole, as every ``Memory`` write does); only its awaiting coroutine is cancelled.
  Either way the call raises ``CancelledError`` (``TimeoutError`` under ``asyncio.wait_for``) and gives its place
  back. ``aclose`` closes the ``Memory`` on the worker thread, so cancelling the ``aclose`` does not stop it.
- **Waiting calls.** ``flush_index`` and ``wait_for_consolidation`` wait for what was called before them, then wait
  for the indexer or the scheduler on a thread of their own, so other calls are not held behind the wait.
- **Collector pauses.** ``AsyncMemory.open`` moves what opening loaded (models, tokenizers, the views' arrays) out of
  the garbage collector's reach (``gc.freeze``): a full collection, which holds the interpreter and so the loop, no
  longer walks them (its longest stall fell from 58 to 17 ms under 16 coroutines; ``tools/async_load.py``).
"""
from __future__ import annotations

import asyncio
import functools
import gc
import inspect
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from lightmem.build import memory_parts
from lightmem.errors import InvalidInputError, LightMemError
from lightmem.memory import Memory

T = TypeVar("T")
DEFAULT_MAX_PENDING = 1024

# The Memory methods offered as coroutines, run in order on the worker thread.
ORDERED = ("add", "add_turns", "batch", "put", "get_by_key", "flush", "pending", "consolidate", "sources", "search",
           "retrieve", "build_context", "explain_context", "get", "get_all", "update", "archive", "restore", "delete", "delete_user",
           "history", "users", "usage", "stats", "index_status", "ltm_stats")
# Methods that wait on something else (the indexer, the scheduler) once the calls before them have run.
WAITING = ("flush_index", "wait_for_consolidation")


class AsyncMemory:
    """``Memory``'s methods, with the same names, arguments and return types, as coroutines.

    Args:
        memory: The ``Memory`` to serve; the ``AsyncMemory`` owns it from then on (``aclose`` closes it).
        max_pending: Calls that may wait or run at once before a new call waits for a place.

    Build one with ``await AsyncMemory.open(path, **options)`` or ``async with AsyncMemory.open(path) as memory``
    (``Memory.open``'s arguments; the models load on a thread, not on the loop).
    """

    def __init__(self, memory: Memory, max_pending: int = DEFAULT_MAX_PENDING) -> None:
        if not isinstance(memory, Memory):
            raise InvalidInputError(f"AsyncMemory serves a Memory, got {type(memory).__name__}")
        if isinstance(max_pending, bool) or not isinstance(max_pending, int) or max_pending < 1:
            raise InvalidInputError(f"max_pending must be a positive whole number, got {max_pending!r}")
        self.memory = memory
        self.max_pending = max_pending
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lightmem-async")
        self._taken = 0  # places held by calls waiting for or running on the worker
        self._waiters: deque[asyncio.Future[bool]] = deque()  # calls waiting for a place, first come first served
        self._closed = False
        self._closing: Future[None] | None = None  # closing the Memory, on the worker after the calls made before

    @classmethod
    def open(cls, path: str | Path, *, max_pending: int = DEFAULT_MAX_PENDING, **options: Any) -> _Opening:
        """Open (or create) a store as ``Memory.open`` does, on a thread: ``await`` it, or use it in ``async with``."""
        return _Opening(cls, path, max_pending, options)

    # -- the gate ------------------------------------------------------------------------------
    async def _enter(self) -> None:
        if self._closed:
            raise LightMemError("this AsyncMemory is closed")
        if self._taken < self.max_pending and not self._waiters:
            self._taken += 1
            return
        waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            granted = await waiter  # True: _leave handed its place over (_taken already counts this call)
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                if waiter.result():
                    self._leave()  # the place came just as the call was cancelled: pass it on
            elif waiter in self._waiters:  # _leave may have dropped it already: it skips cancelled waiters
                self._waiters.remove(waiter)
            raise
        if not granted or self._closed:
            if granted:
                self._leave()
            raise LightMemError("this AsyncMemory is closed")

    def _leave(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(True)
                return
        self._taken -= 1

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn`` on the worker thread after every call made before it."""
        await self._enter()
        try:
            loop = asyncio.get_running_loop()
            outcome: asyncio.Future[T] = loop.create_future()

            def job() -> None:
                # ``Task.cancel`` marks ``outcome`` cancelled at once, on the caller's side of the call, so a call
                # cancelled before the worker reaches it never runs; one that has started finishes in this thread.
                # (Cancelling the worker's own future instead would reach it a loop step later, and the worker
                # could start the call in between.)
                if outcome.cancelled():
                    return
                try:
                    value = fn(*args, **kwargs)
                except BaseException as error:  # noqa: BLE001 - handed to the awaiting coroutine as it is
                    value, failure = None, error
                else:
                    failure = None
                if not loop.is_closed():  # a loop that ended without aclose has no one left to tell
                    loop.call_soon_threadsafe(_settle, outcome, value, failure)

            self._worker.submit(job)
            return await outcome
        finally:
            self._leave()

    async def _wait(self, name: str, *args: Any, **kwargs: Any) -> Any:
        await self._call(lambda: None)  # the calls made before this one have run
        return await asyncio.to_thread(getattr(self.memory, name), *args, **kwargs)

    # -- lifecycle -----------------------------------------------------------------------------
    async def aclose(self) -> None:
        """Refuse new calls, let the ones already made finish, then close the ``Memory`` (its indexer embeds what
        it holds first). Closing twice waits for the first closing to end.

        The closing runs on the worker thread, after the calls made before it, whatever happens to the caller: an
        ``aclose`` cancelled (or timed out) while it waits still closes the ``Memory``, and a later ``aclose``
        waits for that closing (and raises what it raised)."""
        if self._closing is None:
            self._closed = True
            while self._waiters:  # calls still waiting for a place are refused (their _enter says so)
                waiter = self._waiters.popleft()
                if not waiter.done():
                    waiter.set_result(False)
            self._closing = self._worker.submit(self.memory.close)
            self._worker.shutdown(wait=False)  # the worker ends once the closing has run
        # shield: cancelling this caller must not cancel the closing (a pending job of the worker could be)
        await asyncio.shield(asyncio.wrap_future(self._closing))

    @property
    def closed(self) -> bool:
        return self._closed

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _Opening:
    """What ``AsyncMemory.open`` returns: awaitable (the memory) and an async context manager (closes it)."""

    def __init__(self, cls: type[AsyncMemory], path: str | Path, max_pending: int, options: dict[str, Any]) -> None:
        self._cls, self._path, self._max_pending, self._options = cls, path, max_pending, options
        self._memory: AsyncMemory | None = None

    async def _open(self) -> AsyncMemory:
        memory = await asyncio.to_thread(Memory.open, self._path, **self._options)
        freeze_loaded()
        return self._cls(memory, self._max_pending)

    def __await__(self):  # noqa: ANN204 - a generator, as __await__ is
        return self._open().__await__()

    async def __aenter__(self) -> AsyncMemory:
        self._memory = await self._open()
        return self._memory

    async def __aexit__(self, *exc: object) -> None:
        if self._memory is not None:
            await self._memory.aclose()


def _settle(outcome: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if outcome.done():  # the awaiting coroutine was cancelled while the call ran
        return
    if isinstance(error, StopIteration):  # a future cannot hold one (asyncio refuses it): say what it was
        outcome.set_exception(RuntimeError(f"the call raised StopIteration: {error!r}"))
    elif error is not None:
        outcome.set_exception(error)
    else:
        outcome.set_result(value)


def freeze_loaded() -> None:
    """Collect, then move every object alive now to the collector's permanent generation (``gc.freeze``): the
    models and indexes loaded so far live as long as the process, and full collections stop walking them."""
    gc.collect()
    gc.freeze()


def _ordered(name: str) -> Callable[..., Any]:
    sync = getattr(Memory, name)

    @functools.wraps(sync)
    async def method(self: AsyncMemory, *args: Any, **kwargs: Any) -> Any:
        return await self._call(getattr(self.memory, name), *args, **kwargs)

    return method


def _waiting(name: str) -> Callable[..., Any]:
    sync = getattr(Memory, name)

    @functools.wraps(sync)
    async def method(self: AsyncMemory, *args: Any, **kwargs: Any) -> Any:
        return await self._wait(name, *args, **kwargs)

    return method


for _name in ORDERED:
    if hasattr(Memory, _name):
        setattr(AsyncMemory, _name, _ordered(_name))
for _name in WAITING:
    setattr(AsyncMemory, _name, _waiting(_name))

# ``AsyncMemory.open`` takes ``Memory.open``'s arguments and ``max_pending``: help() and editors show them.
_params = list(inspect.signature(memory_parts).parameters.values())
_kinds = inspect.Parameter
AsyncMemory.open.__func__.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [_kinds("cls", _kinds.POSITIONAL_OR_KEYWORD),
     *[p for p in _params if p.kind in (_kinds.POSITIONAL_OR_KEYWORD, _kinds.POSITIONAL_ONLY)],
     *[p for p in _params if p.kind is _kinds.KEYWORD_ONLY],
     _kinds("max_pending", _kinds.KEYWORD_ONLY, default=DEFAULT_MAX_PENDING),
     *[p for p in _params if p.kind is _kinds.VAR_KEYWORD]],
    return_annotation="AsyncMemory")
