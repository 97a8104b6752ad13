"""Any JSON-like input to the Python API is either used or refused with InvalidInputError, never a crash.

Hypothesis throws arbitrary values (huge ints, NaN, infinities, booleans, lone surrogates, nested
junk) at ``Memory.add``, ``search``, ``build_context``, ``update`` and ``Filters.from_mapping``. The
only exception allowed is ``InvalidInputError`` (``ItemNotFoundError`` for an unknown item), and a
refused call leaves the store exactly as it was.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lightmem.errors import InvalidInputError, ItemNotFoundError
from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.types import FILTER_KEYS, Filters, ItemKind

PROPERTY = settings(max_examples=300, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])



def mostly(valid: st.SearchStrategy, junk: st.SearchStrategy) -> st.SearchStrategy:
    """``valid`` four times in five: enough calls get through to exercise the success paths too."""
    return st.one_of(valid, valid, valid, valid, junk)


numbers = st.one_of(
    st.integers(), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([10**309, -(10**309), 10**400, 2**63, -(2**63) - 1, 1.7976931348623157e308, 5e-324, 0, -1,
                     1_700_000_000, 1_700_000_000.5, float("nan"), float("inf")]),
)
strings = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", " ", "\t\n", "\x00", "\ud800", "a\udfffb", "u", "1e400", "9" * 400, "NaN",
                     "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-05:00", "2023-05-08T13:56:00",
                     "1:56 pm on 8 May, 2023", "episodic", "abstract"]),
)
json_like = st.recursive(
    st.one_of(st.none(), st.booleans(), numbers, strings, st.binary(max_size=3)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(strings, inner, max_size=3)),
    max_leaves=8,
)
zones = st.sampled_from([None, timezone.utc, timezone(timedelta(hours=14)), timezone(timedelta(hours=-12))])
junk_times = st.one_of(st.booleans(), numbers, strings, st.datetimes(timezones=zones), st.dates(), json_like)
times = st.one_of(st.integers(0, 4_000_000_000), st.floats(-2e9, 3e10), st.datetimes(datetime(1901, 1, 1), datetime(2999, 1, 1)),
                  st.sampled_from(["2023-05-08T13:56:00", "1:56 pm on 8 May, 2023", "2023/05/23 (Tue) 19:11"]))
timestamps = mostly(st.one_of(st.none(), times), junk_times)
words = st.text(st.characters(categories=["L", "Nd"]), min_size=1, max_size=12)
text = mostly(st.lists(words, min_size=1, max_size=6).map(" ".join), st.one_of(strings, json_like))
message = st.builds(
    lambda known, extra: {**extra, **known},
    st.fixed_dictionaries({"text": text}, optional={"speaker": text, "id": text, "timestamp": timestamps,
                                                    "metadata": mostly(st.dictionaries(words, json_like, max_size=2), json_like)}),
    mostly(st.just({}), st.dictionaries(strings, json_like, max_size=2)),
)
messages = mostly(st.one_of(text, message, st.lists(st.one_of(text, message), min_size=1, max_size=3)), json_like)
user_ids = mostly(st.sampled_from(["u", "v"]), st.one_of(strings, json_like))
counts = mostly(st.one_of(st.none(), st.integers(1, 50)), st.one_of(st.integers(-3, 300), numbers, st.booleans(), strings))
kind_names = st.lists(st.sampled_from([k.value for k in ItemKind]), max_size=2)
# Metadata filters of the right shape, with the values and operator objects that reached a driver or matched
# everything (a lone surrogate, NUL, {}) among good ones.
filter_values = st.one_of(st.sampled_from(["sport", "\ud800", "a\udfffb", "sp\x00rt"]), st.none(), numbers, strings)
metadata_filters = st.dictionaries(
    st.sampled_from(["topic", "rank", "a.b", "arr.0"]),
    st.one_of(filter_values, st.dictionaries(st.sampled_from(["$eq", "$ne", "$gt", "$lte"]), filter_values, max_size=2)),
    min_size=1, max_size=2)
filters = mostly(
    st.one_of(st.none(), st.fixed_dictionaries({}, optional={
        "time_from": timestamps, "time_to": timestamps, "kinds": kind_names, "tags": st.lists(words, max_size=2),
        "include_superseded": st.booleans(), "metadata": metadata_filters})),
    st.one_of(
        st.fixed_dictionaries({}, optional={key: st.one_of(junk_times, st.lists(strings, max_size=3), json_like)
                                            for key in sorted(FILTER_KEYS)}),
        st.builds(Filters, time_from=junk_times, time_to=junk_times, kinds=st.one_of(st.none(), st.lists(strings).map(tuple)),
                  tags=st.one_of(st.none(), st.lists(st.one_of(strings, numbers)).map(tuple)), include_superseded=json_like),
        json_like,
    ),
)
lines = mostly(st.lists(text, max_size=3), json_like)
queries = mostly(text, st.one_of(strings, json_like))


@pytest.fixture(scope="module")
def memory(tmp_path_factory):
    with Memory.open(tmp_path_factory.mktemp("props") / "store", embedder=HashingEmbedder(64), selector=Stage1Selector(),
                     synchronous="OFF") as m:
        m.add(["Ava adopted a puppy named Rex", "Ava moved to Lisbon in May"], user_id="u", timestamp=1_700_000_000)
        yield m


def _state(memory: Memory) -> dict:
    memory.flush_index()  # an earlier add's vectors arriving is not this call's write
    return {u: ([(i.id, i.text, i.topic, i.entities, i.metadata, i.event_time, i.valid_to, i.superseded_by, i.n_tokens)
                 for i in memory.get_all(u, include_archived=True)], memory.stats()[u])
            for u in memory.store.users()}


@PROPERTY
@given(messages=messages, user_id=user_ids, timestamp=timestamps, session_id=mostly(st.one_of(st.none(), words), json_like))
def test_add_writes_or_refuses_and_then_wrote_nothing(memory, messages, user_id, timestamp, session_id):
    before = _state(memory)
    try:
        memory.add(messages, user_id=user_id, timestamp=timestamp, session_id=session_id)
    except InvalidInputError:
        assert _state(memory) == before


@PROPERTY
@given(query=queries, user_id=user_ids, k=counts, budget=counts, filters=filters, stm=lines, now=timestamps)
def test_search_answers_or_refuses(memory, query, user_id, k, budget, filters, stm, now):
    try:
        hits = memory.search(query, user_id, k=k, filters=filters, stm=stm, now=now, budget=budget)
    except InvalidInputError:
        return
    assert all(h.item.user_id == user_id for h in hits)


@PROPERTY
@given(query=queries, k=counts, budget=counts, filters=filters, stm=lines)
def test_build_context_answers_or_refuses(memory, query, k, budget, filters, stm):
    try:
        ctx = memory.build_context(query, "u", stm=stm, budget=budget, k=k, filters=filters)
    except InvalidInputError:
        return
    assert ctx.n_tokens <= ctx.budget


UPDATABLE = ["metadata", "topic", "entities", "provenance", "utility", "n_tokens", "event_time", "valid_from", "valid_to",
             "superseded_by", "not_a_field"]


@PROPERTY
@given(text=mostly(st.one_of(st.none(), text), json_like), which=st.sampled_from(["kept", "kept", "unknown"]),
       fields=st.dictionaries(st.sampled_from(UPDATABLE), st.one_of(json_like, timestamps, st.lists(words, max_size=2)),
                              max_size=3))
def test_update_changes_or_refuses_and_then_changed_nothing(memory, text, which, fields):
    item_id = memory.get_all("u")[0].id if which == "kept" else "no-such-item"
    before = _state(memory), memory.history(item_id, "u")
    try:
        memory.update(item_id, "u", text=text, **fields)
    except (InvalidInputError, ItemNotFoundError):
        assert (_state(memory), memory.history(item_id, "u")) == before


@PROPERTY
@given(value=filters)
def test_filters_from_anything_are_filters_or_refused(value):
    try:
        f = Filters.from_mapping(value)
    except InvalidInputError:
        return
    assert f.kinds is None or all(isinstance(k, ItemKind) for k in f.kinds)
    assert all(t is None or isinstance(t, float) for t in (f.time_from, f.time_to))


@PROPERTY
@given(spec=st.one_of(metadata_filters, json_like))
def test_metadata_filters_answer_or_refuse(memory, spec):
    """A lone surrogate in a filter's value reached the driver (UnicodeEncodeError); an empty operator object
    matched every memory."""
    for call in (lambda: memory.get_all("u", metadata=spec), lambda: memory.search("Ava", "u", filters={"metadata": spec})):
        try:
            call()
        except InvalidInputError as exc:
            str(exc).encode("utf-8")  # the refusal's message can be shown
    if isinstance(spec, dict) and any(v == {} for v in spec.values()):
        with pytest.raises(InvalidInputError):
            memory.get_all("u", metadata=spec)
