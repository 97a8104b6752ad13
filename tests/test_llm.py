"""LLM runtimes: the OpenAI-compatible backend against a local server, tiny local models, JSON repair."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from fakes import ScriptedLLM

from lightmem.llm.base import GenerationError
from lightmem.llm.jsonio import call_json, first_json_value, parse_as, repair_json
from lightmem.llm.openai_backend import OpenAICompatLLM
from lightmem.roles.controller import ControllerOutput


class _Handler(BaseHTTPRequestHandler):
    plan: list[object] = []
    seen: list[dict] = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Handler.seen.append({"body": body, "auth": self.headers.get("Authorization")})
        step = _Handler.plan.pop(0) if _Handler.plan else 200
        if step == "sleep":
            import time

            time.sleep(1.0)
            step = 200
        if step != 200:
            self.send_response(step)
            self.end_headers()
            return
        out = {"choices": [{"message": {"content": "echo: " + body["messages"][0]["content"]}}],
               "usage": {"prompt_tokens": 7, "completion_tokens": 3}}
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = HTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    _Handler.plan, _Handler.seen = [], []
    yield f"http://127.0.0.1:{httpd.server_port}/v1"
    httpd.shutdown()


def test_openai_backend_generates_and_meters(server, monkeypatch):
    monkeypatch.setenv("TEST_KEY", "sekret")
    llm = OpenAICompatLLM(server, "tiny", api_key_env="TEST_KEY")
    assert llm.generate(["hello", "world"], role="writer") == ["echo: hello", "echo: world"]
    assert _Handler.seen[0]["auth"] == "Bearer sekret" and _Handler.seen[0]["body"]["model"] == "tiny"
    usage = llm.meter.summary()["writer"]
    assert usage["calls"] == 2 and usage["input_tokens"] == 14 and usage["output_tokens"] == 6


def test_openai_backend_retries_transient_errors(server):
    _Handler.plan = [503, 429, 200]
    llm = OpenAICompatLLM(server, "tiny", max_retries=2, backoff_s=0.01)
    assert llm.generate(["x"]) == ["echo: x"] and len(_Handler.seen) == 3


def test_openai_backend_gives_up_with_a_clear_error(server):
    _Handler.plan = [400]
    llm = OpenAICompatLLM(server, "tiny", max_retries=3, backoff_s=0.01)
    with pytest.raises(GenerationError, match="failed after"):
        llm.generate(["x"], role="controller")
    assert len(_Handler.seen) == 1  # a 400 is not retried
    assert llm.meter.summary()["controller"]["failures"] == 1
    _Handler.plan = ["sleep", "sleep"]
    with pytest.raises(GenerationError):
        OpenAICompatLLM(server, "tiny", timeout_s=0.2, max_retries=1, backoff_s=0.01).generate(["slow"])
    with pytest.raises(GenerationError):
        OpenAICompatLLM("http://127.0.0.1:9/v1", "tiny", timeout_s=0.5, max_retries=0).generate(["nobody listens"])


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"a": 1}', {"a": 1}),
        ('Sure! Here it is:\n```json\n{"a": [1, 2,],}\n```\nHope it helps', {"a": [1, 2]}),
        ("{'a': 'b', 'c': True, 'd': None}", {"a": "b", "c": True, "d": None}),
        ('prefix {"a": {"b": "x}y"}} suffix {"z": 0}', {"a": {"b": "x}y"}}),
        ('{"memories": [{"text": "cut off', {"memories": [{"text": "cut off"}]}),
        ('[{"q": 1}]', [{"q": 1}]),
    ],
)
def test_json_repair(text, expected):
    assert repair_json(text) == expected


@pytest.mark.parametrize("text", ["", "no json here", "{]", None])
def test_json_repair_refuses_garbage(text):
    with pytest.raises(ValueError):
        repair_json(text)
    assert first_json_value("just words") is None


def test_schema_validation_rejects_wrong_shapes():
    with pytest.raises(ValueError):
        parse_as('{"hqs": []}', ControllerOutput)  # at least one HQ
    with pytest.raises(ValueError):
        parse_as('{"hqs": [{"query": "x y", "layer": "SQL"}]}', ControllerOutput)
    assert parse_as('{"hqs": [{"query": "where is Ava"}]}', ControllerOutput).hqs[0].layer == "MTM"


def test_call_json_repairs_retries_and_falls_back():
    # first pass: p1 ok, p2 and p3 malformed; retries: p2 fixed, p3 still junk
    llm = ScriptedLLM(['{"hqs": [{"query": "ok one"}]}', "garbage", "junk", '{"hqs": [{"query": "fixed on retry"}]}', "junk"])
    out = call_json(llm, ["p1", "p2", "p3"], ControllerOutput, "controller", lambda p: p + " RETRY")
    assert out[0].hqs[0].query == "ok one"
    assert out[1].hqs[0].query == "fixed on retry"
    assert out[2] is None
    summary = llm.meter.summary()["controller"]
    assert summary["repaired"] == 1 and summary["failures"] == 1
    assert llm.prompts[-1].endswith("RETRY")
    down = ScriptedLLM([RuntimeError("backend down")])
    assert call_json(down, ["p"], ControllerOutput, "controller", lambda p: p) == [None]


@pytest.fixture(scope="module")
def tiny_lm(tiny_models):
    """The tiny random Llama with the packaged MiniLM (WordPiece) tokenizer."""
    return tiny_models.llama(), tiny_models.tok


def test_transformers_backend_batches_generation_and_yes_no(tiny_lm):
    from lightmem.llm.transformers_backend import TransformersLLM

    llm = TransformersLLM.from_objects(*tiny_lm, max_new_tokens=4, batch_size=2)
    outs = llm.generate(["short", "a much longer prompt than the other one", "third"], role="writer")
    assert len(outs) == 3 and all(isinstance(o, str) for o in outs)
    probs = llm.yes_probability(["is it?", "really?"], role="selector")
    assert len(probs) == 2 and all(0.0 <= p <= 1.0 for p in probs)
    usage = llm.meter.summary()
    assert usage["writer"]["calls"] == 2 and usage["writer"]["output_tokens"] <= 12 and usage["selector"]["calls"] == 1


def test_transformers_backend_loads_a_saved_model_with_a_lora_adapter(tiny_lm, tmp_path):
    import torch
    from peft import LoraConfig, get_peft_model

    from lightmem.llm.transformers_backend import TransformersLLM

    model, tok = tiny_lm
    model.save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    peft_model = get_peft_model(model, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():  # a non-zero adapter, so loading it changes the outputs
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.fill_(0.5)
    peft_model.save_pretrained(tmp_path / "adapter")
    plain = TransformersLLM(str(tmp_path / "base"), device="cpu", dtype="fp32", max_new_tokens=3)
    tuned = TransformersLLM(str(tmp_path / "base"), device="cpu", dtype="fp32", adapter=str(tmp_path / "adapter"), max_new_tokens=3)
    assert type(tuned.model).__name__.startswith("Peft")
    a, b = plain.yes_probability(["is it so?"]), tuned.yes_probability(["is it so?"])
    assert a != b and len(tuned.generate(["hello"])) == 1


def test_a_backend_error_is_counted_once():
    down = ScriptedLLM([RuntimeError("backend down")])
    call_json(down, ["p1", "p2"], ControllerOutput, "controller", lambda p: p)
    assert down.meter.summary()["controller"]["failures"] == 1  # one failed call, not one per prompt
