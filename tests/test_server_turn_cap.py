"""POST /v1/memories takes at most MAX_TURNS_PER_REQUEST turns: a bigger request is refused whole, before any write."""
from __future__ import annotations

from fastapi.testclient import TestClient

from lightmem.memory import Memory
from lightmem.models.embedder import HashingEmbedder
from lightmem.retrieval.stage2 import Stage1Selector
from lightmem.server import KeyRing, create_app
from lightmem.server.schemas import MAX_TURNS_PER_REQUEST

KEY = "turn-cap-test-key-0001"


def test_a_request_over_the_turn_cap_is_refused_and_writes_nothing(tmp_path):
    app = create_app(lambda: Memory.open(tmp_path / "s", embedder=HashingEmbedder(64), selector=Stage1Selector()),
                     KeyRing({KEY: ["alice"]}))
    h = {"Authorization": f"Bearer {KEY}"}
    with TestClient(app) as client:
        over = [{"speaker": "A", "text": f"t{i}"} for i in range(MAX_TURNS_PER_REQUEST + 1)]
        r = client.post("/v1/memories", headers=h, json={"user_id": "alice", "messages": over})
        assert r.status_code == 422 and "messages" in r.text
        assert client.get("/v1/memories", params={"user_id": "alice"}, headers=h).json()["items"] == []
        r = client.post("/v1/memories", headers=h, json={"user_id": "alice", "messages": over[:MAX_TURNS_PER_REQUEST]})
        assert r.status_code == 201 and len(r.json()["items"]) == MAX_TURNS_PER_REQUEST
