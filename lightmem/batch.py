"""Batch writes: many adds, updates and deletions in one call (``Memory.batch``, ``POST /v1/batch``).

Every operation is checked before the first is written: one bad operation raises ``InvalidInputError`` naming its
index (``ops[3] (update): ...``) and nothing is written. Then, by default, each operation commits on its own and the
answer carries one status per operation:

- ``ok``: done; ``items`` (an add's memories), ``item`` (an update's memory) or ``removed`` (a deletion's counts);
- ``not_found``: an update or deletion of a memory the user does not have; the batch goes on;
- ``failed``: the store failed (a full disk, a lost database): the batch stops there, ``error`` says why;
- ``not_attempted``: after a failure.

With ``atomic=True`` the whole batch is one transaction: every operation commits or none does, and the first
error (its index in ``op_index`` and in a note) is raised. A deletion's text is gone from the store's files when
the call returns, as for a single ``delete``; the erasure that makes it so (on SQLite: emptying the write-ahead log,
and reading the file for copies of the texts in its unused space) runs once per batch, not once per deletion.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from lightmem.errors import InvalidInputError, ItemNotFoundError, LightMemError, StoreError, shown
from lightmem.stores.rows import check_update
from lightmem.validation import check_id, check_item_fields, check_turn_lengths, check_user_id, to_turns
from lightmem.write_policy import resolve as resolve_policy

Memory = Any  # a lightmem.Memory (this module sits below it: memory.py imports it)

MAX_BATCH_OPS = 1_000
# What one request may make a server worker do: turns written, plus memories updated or deleted. POST /v1/memories
# takes this many turns; a batch this much summed over its operations (an add counts its turns, an update or a
# deletion 1), atomic or not. An atomic batch holds its worker until it commits, so this bounds how long another
# user's call waits behind one request (docs/serving.md, "Batches"). The Python API is not bound by it.
MAX_TURNS_PER_REQUEST = 2_000
OPS = ("add", "update", "delete")
_FIELDS = {
    "add": {"op", "user_id", "messages", "timestamp", "session_id", "context", "policy"},
    "update": None,  # the fields of Memory.update: checked by check_item_fields
    "delete": {"op", "user_id", "item_id"},
}


@dataclass(frozen=True)
class PlannedOp:
    """One checked operation: what it is, for whom, and the call that performs it."""

    index: int
    op: str
    user_id: str
    run: Callable[[], dict[str, Any]]
    work: int = 1  # turns written, or memories changed (``MAX_TURNS_PER_REQUEST``)


def plan(memory: Memory, ops: Sequence[Mapping[str, Any]], user_id: str | None = None,
         max_turns: int | None = None) -> list[PlannedOp]:
    """Check every operation (``user_id``: for those that name none) and prepare its call; nothing is written.

    ``max_turns``: at most this many turns and changed memories in all (an add counts its turns, an update or a
    deletion 1; the server passes ``MAX_TURNS_PER_REQUEST``); None: no bound but ``MAX_BATCH_OPS``.

    Raises:
        InvalidInputError: no operations, more than ``MAX_BATCH_OPS``, more work than ``max_turns``, or a bad
            operation (named by its index).
    """
    if isinstance(ops, (str, bytes, Mapping)) or not isinstance(ops, Sequence):
        raise InvalidInputError(f"ops must be a list of operations, got {type(ops).__name__}")
    if not ops:
        raise InvalidInputError("ops is empty: give at least one operation")
    if len(ops) > MAX_BATCH_OPS:
        raise InvalidInputError(f"a batch holds at most {MAX_BATCH_OPS:,} operations, got {len(ops):,}; split it")
    default = None if user_id is None else check_user_id(user_id)
    planned, work = [], 0
    for i, op in enumerate(ops):
        kind = op.get("op") if isinstance(op, Mapping) else None
        try:
            planned.append(_plan_one(memory, i, op, default))
        except InvalidInputError as exc:
            raise InvalidInputError(f"ops[{i}]{f' ({kind})' if kind in OPS else ''}: {exc}") from exc
        work += planned[-1].work
        if max_turns is not None and work > max_turns:
            raise InvalidInputError(
                f"a batch holds at most {max_turns:,} turns and changed memories in all (an add counts its turns, an "
                f"update or a deletion 1), and ops[0..{i}] hold {work:,}: split it into several requests")
    return planned


def _plan_one(memory: Memory, i: int, op: Any, default: str | None) -> PlannedOp:
    if not isinstance(op, Mapping):
        raise InvalidInputError(f"an operation is an object with an 'op' field, got {type(op).__name__}")
    kind = op.get("op")
    if kind not in OPS:
        raise InvalidInputError(f"'op' must be one of {list(OPS)}, got {shown(kind)}")
    allowed = _FIELDS[kind]
    if allowed is not None and set(op) - allowed:
        raise InvalidInputError(f"unknown fields {sorted(map(str, set(op) - allowed))}; a {kind} takes {sorted(allowed)}")
    if op.get("user_id") is None and default is None:
        raise InvalidInputError("'user_id' is missing (give it in the operation or as the batch's user_id)")
    user = check_user_id(op["user_id"]) if op.get("user_id") is not None else default
    assert user is not None
    if kind == "add":
        if "messages" not in op:
            raise InvalidInputError("'messages' is missing")
        turns = to_turns(op["messages"], op.get("timestamp"), op.get("session_id"))
        check_turn_lengths(turns, memory.max_turn_chars)
        context = tuple(op.get("context") or ())
        policy = resolve_policy(op.get("policy"))  # checked with the rest, before anything is written
        return PlannedOp(i, kind, user, lambda: {"items": memory.add_turns(user, turns, context, policy=policy)},
                         len(turns))
    item_id = check_id(op.get("item_id"), "item_id")
    if kind == "delete":
        return PlannedOp(i, kind, user, lambda: {"removed": memory.delete(item_id, user)})
    text, keep_history = op.get("text"), op.get("keep_history", False)
    if not isinstance(keep_history, bool):
        raise InvalidInputError(f"keep_history must be True or False, got {shown(keep_history)}")
    fields = {k: v for k, v in op.items() if k not in ("op", "user_id", "item_id", "text", "keep_history")}
    check_item_fields(fields, text)
    check_update(fields, has_vector=True)  # a field the store does not update is refused now, not mid-batch
    return PlannedOp(i, kind, user, lambda: {"item": memory.update(item_id, user, text=text, keep_history=keep_history,
                                                                    **fields)})


def run(memory: Memory, planned: Sequence[PlannedOp], atomic: bool = False,
        each: Callable[[], AbstractContextManager[Any]] = nullcontext) -> list[dict[str, Any]]:
    """Perform checked operations in order (see the module's docstring for the statuses and ``atomic``).

    ``each`` makes a context entered around every operation of a batch that is not atomic, and once around an
    atomic one: the server passes its one-call-at-a-time lock, so its other requests run between the operations
    of a long batch instead of waiting for all of them (each operation commits on its own anyway)."""
    if atomic:  # one transaction: its deletions' erasure runs once, at its commit
        with each():
            return memory.store.run_atomic(lambda: [_ok(p, _numbered(p)) for p in planned])
    results: list[dict[str, Any]] = []
    # The erasure after each deletion (the store's log and a read of its whole file) waits for the end: once per
    # batch, not once per deletion; each erased text is still gone from the files when the call returns.
    with memory.store.erasing_once() as erase:
        for n, p in enumerate(planned):
            try:
                with each():
                    done = p.run()
                results.append(_ok(p, done))
            except ItemNotFoundError as exc:
                results.append({"index": p.index, "op": p.op, "status": "not_found", "error": _message(exc)})
            except (StoreError, LightMemError) as exc:
                results.append({"index": p.index, "op": p.op, "status": "failed", "error": f"{type(exc).__name__}: {exc}"})
                results.extend({"index": q.index, "op": q.op, "status": "not_attempted"} for q in planned[n + 1:])
                break
        if any(p.op != "add" for p in planned):  # an add erases nothing
            with each():
                erase()
    return results


def _numbered(p: PlannedOp) -> dict[str, Any]:
    try:
        return p.run()
    except Exception as exc:
        exc.op_index = p.index  # type: ignore[attr-defined]
        exc.add_note(f"in ops[{p.index}] ({p.op}) of an atomic batch: nothing of the batch was written")
        raise


def _ok(p: PlannedOp, result: dict[str, Any]) -> dict[str, Any]:
    return {"index": p.index, "op": p.op, "status": "ok", **result}


def _message(exc: BaseException) -> str:
    return exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
