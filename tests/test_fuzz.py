"""The HTTP API fuzzed from its own OpenAPI schema (schemathesis): no input gets a 5xx, none writes half.

Each operation gets generated valid and invalid requests, bounded and derandomized so a run is
reproducible; each response must be no 5xx and conform to the schema, and a refused request
must leave the store as it was. Random generation rarely reaches the ends of the number line, so
a second test puts numbers beyond float and int64 range into every numeric field of valid requests.
"""
from __future__ import annotations

from collections.abc import Callable

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import (
    negative_data_rejection,
    not_a_server_error,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)

from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.server import KeyRing, create_app

pytestmark = pytest.mark.fuzz

ADMIN, ALICE = "admin-key-0000000003", "alice-key-0000000001"
KEYS = {ADMIN: ["*"], ALICE: ["alice"]}
AUTH = {"Authorization": f"Bearer {ADMIN}"}  # past 401 and 403, so the fuzzer reaches validation
MAX_EXAMPLES = 30
# Past the range of a float (10**309 made float() raise), of int64 (SQLite's integers), the largest floats
EXTREMES = [10**309, -(10**309), 10**400, 2**63, -(2**63) - 1, 1.7976931348623157e308, -1e308, 5e-324, 0, -1]
FUZZ = settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
OPERATIONS = [(method.upper(), path) for path, methods in create_app(lambda: None, KeyRing(KEYS)).openapi()["paths"].items()
              for method in methods]


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    """The schema of an app over a store with two users, and a second connection to that store."""
    store = tmp_path_factory.mktemp("fuzz") / "store"

    def open_memory() -> Memory:
        return Memory.open(store, embedder=HashingEmbedder(64), selector=Stage1Selector(), synchronous="OFF")

    with open_memory() as memory:  # something to search, list and change
        for user in ("alice", "bob"):
            memory.add([f"{user} adopted a puppy named Rex", f"{user} moved to Lisbon in May"], user_id=user,
                       timestamp=1_700_000_000)
    # schemathesis runs the app's lifespan in process (it opens a memory) and ends it after each test
    app = create_app(open_memory, KeyRing(KEYS), max_body_bytes=1 << 16)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=schemathesis.Config(seed=28))
    with open_memory() as committed:  # sees what the app committed, as a restarted server would
        yield schema, committed


def snapshot(memory: Memory) -> dict:
    """What a request could change: each user's items (text, topic, metadata, archived) and counts."""
    def counts(u: str) -> dict | None:  # items' vectors arriving from the app's background indexer are not a request's write
        c = memory.stats().get(u)
        return None if c is None else {k: v for k, v in c.items() if k != "unembedded"}

    return {u: ([(i.id, i.text, i.topic, i.metadata, i.archived) for i in memory.get_all(u, include_archived=True)],
                counts(u))
            for u in memory.store.users()}


@pytest.mark.parametrize("method, path", OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_no_input_gets_a_server_error_or_writes_half(api, method, path):
    schema, committed = api
    operation = schema[path][method]
    cases = st.one_of(operation.as_strategy(GenerationMode.POSITIVE), operation.as_strategy(GenerationMode.NEGATIVE))

    @FUZZ
    @given(case=cases)
    def check(case: schemathesis.Case) -> None:
        before = snapshot(committed)
        # Every check but positive_data_acceptance: the API refuses, with its documented 422, some
        # input the schema allows but that means nothing (a date string that is no date, a time
        # outside 1900-3000, time_from after time_to, a PATCH that changes nothing).
        response = case.call(headers=AUTH)
        # A body over the server's limit is refused whole with its documented 413 before it is read: the refusal of
        # an invalid request, which the negative-data check does not count among refusals.
        excluded = [positive_data_acceptance] + ([negative_data_rejection] if response.status_code == 413 else [])
        case.validate_response(response, excluded_checks=excluded, headers=AUTH)
        if response.status_code >= 400:
            assert snapshot(committed) == before, f"{method} {path} answered {response.status_code} but changed the store"

    check()


def with_extremes(value: object, pick: Callable[[], object]) -> object:
    """``value`` with every number (not a boolean) in it replaced by ``pick()``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return pick()
    if isinstance(value, dict):
        return {k: with_extremes(v, pick) for k, v in value.items()}
    if isinstance(value, list):
        return [with_extremes(v, pick) for v in value]
    return value


@pytest.mark.parametrize("method, path", OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_numbers_beyond_float_and_int64_range_get_no_server_error(api, method, path):
    schema, committed = api
    operation = schema[path][method]

    @FUZZ
    @given(case=operation.as_strategy(GenerationMode.POSITIVE), data=st.data())
    def check(case: schemathesis.Case, data: st.DataObject) -> None:
        def pick() -> object:
            return data.draw(st.sampled_from(EXTREMES), label="number")

        if isinstance(case.body, (dict, list)):
            case.body = with_extremes(case.body, pick)
        if case.query:
            case.query = with_extremes(dict(case.query), pick)
        before = snapshot(committed)
        response = case.call_and_validate(headers=AUTH, checks=[not_a_server_error, status_code_conformance,
                                                                response_schema_conformance])
        if response.status_code >= 400:
            assert snapshot(committed) == before, f"{method} {path} answered {response.status_code} but changed the store"

    check()
