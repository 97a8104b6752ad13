"""Every config group composes, and every option instantiates (the real conf/ tree)."""
from __future__ import annotations

import pytest
from conftest import ROOT, compose
from omegaconf import open_dict

from lightmem.config import build_memory
from lightmem.retrieval.scoring import Fusion

# Each group's options, the fenced-off ones under experimental/ included (selected as `group=experimental/name`)
GROUPS = {g.name: sorted(p.relative_to(g).with_suffix("").as_posix() for p in g.rglob("*.yaml"))
          for g in (ROOT / "conf").iterdir() if g.is_dir()}


@pytest.mark.parametrize("retrieval", GROUPS["retrieval"])
@pytest.mark.parametrize("logger", GROUPS["logger"])
def test_groups_compose_and_build(tmp_path, retrieval, logger):
    cfg = compose("locomo", [f"retrieval={retrieval}", f"logger={logger}", "encoder=hashing", "selector=none"])
    m = build_memory(cfg, tmp_path / "s")
    assert m.retriever.fusion is Fusion(cfg.retrieval.fusion)
    assert m.retriever.candidate_factor == 5  # the learned ranker orders 5K Stage-1 candidates
    m.close()


@pytest.fixture(scope="module")
def tiny_selector_ckpt(tmp_path_factory, tiny_models):
    return tiny_models.save(tiny_models.bert("sequence", 1), tmp_path_factory.mktemp("selector"))


@pytest.fixture(scope="module")
def tiny_complexity_ckpt(tmp_path_factory, tiny_models):
    return tiny_models.save(tiny_models.bert("sequence", 2), tmp_path_factory.mktemp("complexity"))


@pytest.fixture(scope="module")
def tiny_slm_ckpt(tmp_path_factory, tiny_selector_ckpt):
    """The SLM selector's folder shape (a cross-encoder and its stack.json) over the tiny cross-encoder."""
    import json
    import shutil

    folder = tmp_path_factory.mktemp("slm") / "slm"
    shutil.copytree(tiny_selector_ckpt, folder)
    (folder / "stack.json").write_text(json.dumps({"alpha": 1.0, "top_n": 2, "base_model": "all-MiniLM-L6-v2",
                                                   "num_layers": 2, "max_length": 32}))
    return folder


@pytest.mark.parametrize("group", ["controller", "selector", "writer"])
def test_every_role_option_builds_into_a_working_memory(tmp_path, group, tiny_selector_ckpt, tiny_complexity_ckpt,
                                                        tiny_slm_ckpt):
    tiny = {("selector", "cross_encoder"): f"selector.checkpoint={tiny_selector_ckpt}",  # trained models: tiny stand-ins
            ("selector", "slm"): f"selector.checkpoint={tiny_slm_ckpt}",  # (the committed ones: test_slm.py, test_roles.py)
            ("controller", "experimental/fast_trained"): f"controller.complexity.checkpoint={tiny_complexity_ckpt}"}
    assert "experimental/generative" in GROUPS[group]  # every role keeps its fenced-off generative option
    for option in GROUPS[group]:
        overrides = [f"{group}={option}", "encoder=hashing", "llm._target_=fakes.ScriptedLLM", tiny.get((group, option), "memory.k=10")]
        if group == "selector" and option == "threshold":  # hashing vectors of paraphrases sit below the 0.30 cosine
            overrides.append("selector.tau=0.0")
        m = build_memory(compose("locomo", overrides), tmp_path / f"{group}-{option.replace('/', '-')}")
        role = {"controller": m.controller, "selector": m.retriever.selector, "writer": m.writer}[group]
        name = option.rsplit("/", 1)[-1]
        named = {"ranker": "LearnedRanker", "ranker_linear": "LearnedRanker"}.get(name)
        assert (type(role).__name__ == named if named else
                type(role).__name__.lower().startswith(name.replace("_", "")[:4]) or name in ("none", "turn", "passthrough"))
        m.add([{"speaker": "Ava", "text": "I bake sourdough every Sunday", "id": "T1"}], user_id="u", timestamp="2023-05-07")
        hits = m.search("What does Ava bake?", "u", k=2)
        assert hits and hits[0].item.provenance == ["T1"]
        m.close()


@pytest.fixture(scope="module")
def tiny_compressor_ckpt(tmp_path_factory, tiny_models):
    # 3 layers: the segmenter averages the attention of the last three
    return tiny_models.save(tiny_models.bert("token", 2, layers=3), tmp_path_factory.mktemp("compressor"))


TURNS = [{"speaker": "Ava", "text": "I bake sourdough bread every Sunday morning.", "id": "T1"},
         {"speaker": "Ben", "text": "My sister Ava bakes sourdough for the whole street.", "id": "T2"},
         {"speaker": "Ava", "text": "We hiked up Mount Tam with the dog yesterday.", "id": "T3"}]


@pytest.mark.parametrize("experiment", GROUPS["experiment"])
def test_every_experiment_builds_a_memory_that_stores_and_finds_a_turn(tmp_path, experiment, tiny_compressor_ckpt):
    """Each experiment's pipeline as composed, with offline stand-ins for the heavy models: hashing vectors,
    a scripted LLM, a tiny random compressor, spaCy off (the committed linear ranker is tiny and stays)."""
    cfg = compose("locomo", [f"+experiment={experiment}", "encoder=hashing", "llm._target_=fakes.ScriptedLLM"])
    with open_dict(cfg):
        for node in (cfg.controller, cfg.sensory, cfg.ltm):
            if "nlp" in node:
                node.nlp = False
        if cfg.sensory.get("compressor"):
            cfg.sensory.compressor.checkpoint = str(tiny_compressor_ckpt)
        if cfg.ltm.enabled:
            cfg.ltm.background = False  # the test runs the cycle itself
        if "tau" in cfg.selector:  # hashing vectors of paraphrases sit below the 0.30 cosine
            cfg.selector.tau = 0.0
    m = build_memory(cfg, tmp_path / "s")
    assert (m.sensory_stage is not None) == cfg.sensory.enabled and (m.ltm is not None) == cfg.ltm.enabled
    m.add(TURNS, user_id="u", timestamp="2023-05-07")
    m.flush("u")  # the sensory stage's buffers
    m.flush_index()  # and the new memories' vectors
    if m.ltm is not None:
        assert m.consolidate("u")[0].units >= 1
    hits = m.search("What does Ava bake?", "u", k=3)
    assert hits and "bake" in hits[0].item.text.lower()
    if cfg.ltm.get("routing") == "ltm_only":  # no MTM: only graph nodes come back
        assert all(h.item.id.startswith("ltm:") for h in hits)
    else:
        assert ["T1"] in [h.item.provenance for h in hits]
    m.close()


def test_schema_rejects_unknown_keys():
    with pytest.raises(Exception, match="nonexistent"):
        compose("locomo", ["store.nonexistent=1"])


def test_latency_config_disables_the_query_cache():
    assert compose("latency", []).encoder.query_cache_size == 0


def test_shared_runtime_builds_a_selector_once_per_config(tmp_path, tiny_selector_ckpt):
    from lightmem.config import SharedRuntime

    cfg = compose("locomo", ["encoder=hashing", "selector=cross_encoder", f"selector.checkpoint={tiny_selector_ckpt}"])
    shared = SharedRuntime(cfg)
    a, b = build_memory(cfg, tmp_path / "a", shared=shared), build_memory(cfg, tmp_path / "b", shared=shared)
    c = build_memory(compose("locomo", ["encoder=hashing", "selector=none"]), tmp_path / "c", shared=shared)
    assert a.retriever.selector is b.retriever.selector  # one model load for all conversations
    assert type(c.retriever.selector).__name__ == "Stage1Selector"  # another config still gets its own
    for m in (a, b, c):
        m.close()


@pytest.mark.parametrize("option", ["none", "lightmem", "full", "experimental/cross_entropy"])
def test_sensory_options_compose_into_a_write_path_spec(option):
    from lightmem.config import sensory_spec

    cfg = compose("locomo", [f"sensory={option}"])
    if option == "none":
        assert cfg.sensory.enabled is False
        return
    spec = sensory_spec(cfg.sensory)
    assert spec.compress.rate == 0.6 and spec.segment.buffer_tokens == 512 and spec.stm_threshold == 512
    assert spec.gate.enabled is (option == "full") and spec.importance.enabled is (option == "full")
    assert spec.segment.layers == (-3, -2, -1)


def test_build_memory_wires_the_write_path(tmp_path, embedder):
    from lightmem.config import build_memory

    cfg = compose("locomo", ["sensory=lightmem", "sensory.compress.enabled=false", "sensory.segment.method=similarity",
                             "selector=none", "sensory.stm_threshold=0"])
    m = build_memory(cfg, tmp_path / "s", embedder=embedder)
    assert m.sensory_stage is not None and m.sensory_stage.compressor is None
    m.add([{"speaker": "Caroline", "text": "I went hiking yesterday."}], user_id="u", timestamp="2023-05-08")
    m.flush("u")
    assert m.get_all("u")[0].text == "Caroline: Caroline went hiking yesterday [2023-05-07]."
    m.close()


@pytest.mark.parametrize("option, hops", [("lightmem", 1), ("flat", 0)])
def test_ltm_options_compose_and_wire(tmp_path, embedder, option, hops):
    from lightmem.config import build_memory

    cfg = compose("locomo", [f"ltm={option}", "selector=none", "ltm.nlp=false", "ltm.background=false",
                             "ltm.consolidation.recursive=false", "ltm.routing=controller"])
    m = build_memory(cfg, tmp_path / "s", embedder=embedder)
    assert m.ltm is not None and m.ltm.scheduler is None and m.retriever.ltm is m.ltm.graph
    assert m.retriever.routing == "controller" and m.retriever.ltm_hops == hops
    assert m.ltm.consolidator.spec.recursive is False and m.ltm.consolidator.spec.cluster.tau == 0.85
    m.add([{"speaker": "Ann", "text": "The Science Museum opened a new Space Wing."}], user_id="u", timestamp="2023-05-08")
    assert m.consolidate("u")[0].units >= 1
    m.close()
    assert compose("locomo", []).ltm.enabled is False
    with pytest.raises(Exception, match="nonsense"):
        build_memory(compose("locomo", ["ltm=lightmem", "+ltm.nonsense=1", "ltm.nlp=false"]), tmp_path / "t", embedder=embedder)


def test_a_benchmark_recomposing_its_own_option_keeps_the_command_lines_overrides_of_it():
    """eval/sensory.py's ingest part recomposes sensory=none and sensory=lightmem: an override such as
    sensory.compressor.backend=onnx_int8 must reach the run of the app's own choice, and only it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.hydra_config import HydraConfig

    from lightmem.config import compose_option

    compose("sensory_bench", [])  # registers the schemas
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        app = hydra_compose("sensory_bench", ["sensory.compress.rate=0.5", "sensory.compressor.backend=onnx_int8"],
                            return_hydra_config=True)
        HydraConfig.instance().set_config(app)  # as inside @hydra.main
        try:
            own = compose_option(ROOT / "conf", "sensory_bench", "sensory", "lightmem")
            other = compose_option(ROOT / "conf", "sensory_bench", "sensory", "none")
        finally:
            HydraConfig.instance().cfg = None
    assert (own.compress.rate, own.compressor.backend) == (0.5, "onnx_int8")
    assert not other.enabled and other.compressor is None
    fresh = compose_option(ROOT / "conf", "sensory_bench", "sensory", "lightmem")  # outside an app: the file as written
    assert fresh.compress.rate == 0.6


def test_the_capacity_default_is_stated_once_and_every_entry_point_takes_it():
    import inspect

    from omegaconf import OmegaConf

    from lightmem.build import memory_parts
    from lightmem.config.schemas import EmbeddedStoreConfig, ServerStoreConfig
    from lightmem.memory import Memory
    from lightmem.stores.base import DEFAULT_CAPACITY
    from lightmem.stores.embedded.store import SQLiteStore
    from lightmem.stores.factory import open_store
    from lightmem.stores.postgres.store import PostgresStore

    for fn in (Memory.open, memory_parts, open_store, SQLiteStore.__init__, PostgresStore.__init__):
        assert inspect.signature(fn).parameters["capacity"].default == DEFAULT_CAPACITY, fn
    assert EmbeddedStoreConfig().capacity == ServerStoreConfig().capacity == DEFAULT_CAPACITY
    for name in ("sqlite", "postgres"):  # the store nodes leave it to the schema
        assert "capacity" not in OmegaConf.load(ROOT / "conf" / "store" / f"{name}.yaml")
        assert compose("locomo", [f"store={name}"]).store.capacity == DEFAULT_CAPACITY


def test_the_retrieval_defaults_are_the_retrievers_own():
    """The ``retrieval`` schema is read from the engine's spec dataclasses, and the default YAML restates no value."""
    import dataclasses

    from omegaconf import OmegaConf

    from lightmem.config.schemas import RetrievalConfig
    from lightmem.retrieval.spec import PackingSpec, Stage1Spec

    specs = {f.name: f.default for spec in (Stage1Spec, PackingSpec) for f in dataclasses.fields(spec)}
    fields = {f.name: f.default for f in dataclasses.fields(RetrievalConfig)}
    assert {"w_dense", "candidate_factor", "whole_share", "hop_seeds", "session_spread"} <= set(fields)
    assert fields == specs
    assert set(OmegaConf.load(ROOT / "conf" / "retrieval" / "weighted.yaml")) == {"fusion"}
    composed = compose("locomo", ["retrieval=bm25"]).retrieval
    assert composed.w_dense == 0.0 and composed.candidate_factor == Stage1Spec().candidate_factor


def test_the_store_backend_is_a_target_whose_settings_and_defaults_come_from_its_signature(tmp_path):
    import inspect

    from omegaconf import OmegaConf

    from lightmem.config import build_memory
    from lightmem.stores.embedded.store import SQLiteStore
    from lightmem.stores.postgres.store import PostgresStore

    for name, cls, location in (("sqlite", SQLiteStore, "path"), ("postgres", PostgresStore, "uri")):
        node = compose("locomo", [f"store={name}"]).store
        assert node._target_ == f"{cls.__module__}.{cls.__qualname__}"
        params = {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items()
                  if k not in ("self", "path", "uri", "dim", "embedder")}
        assert {k: v for k, v in node.items() if k not in ("_target_", "uri")} == params
        # the YAML names its schema and restates no default
        assert set(OmegaConf.load(ROOT / "conf" / "store" / f"{name}.yaml")) <= {"defaults", "uri"}
        assert (location == "uri") == ("uri" in node)
    cfg = compose("locomo", ["encoder=hashing", "store.index=hnsw", "store.synchronous=NORMAL"])
    mem = build_memory(cfg, tmp_path / "run")
    try:
        assert isinstance(mem.store, SQLiteStore) and mem.store.index_kind == "hnsw"
        assert mem.store.path.parent == tmp_path / "run"
    finally:
        mem.close()
    with pytest.raises(Exception, match="pool_size"):  # a server setting is not the embedded store's
        compose("locomo", ["store.pool_size=2"])


def test_a_config_that_names_no_role_builds_the_roles_memory_open_uses(tmp_path, embedder):
    from omegaconf import OmegaConf

    from lightmem.config.builders import SharedRuntime
    from lightmem.config.schemas import PipelineConfig
    from lightmem.memory import Memory

    node = OmegaConf.structured(PipelineConfig)
    shared = SharedRuntime(node)
    built = {name: shared.role(node[name]) for name in ("controller", "selector", "writer")}
    mem = Memory.open(tmp_path / "m", embedder=embedder)
    try:
        opened = {"controller": mem.controller, "selector": mem.retriever.selector, "writer": mem.writer}
        for name, role in built.items():
            assert type(role) is type(opened[name]), name
        assert built["writer"].compact and mem.writer.compact
        assert type(built["selector"]).__name__ == "LearnedRanker"  # the shipped checkpoint, not the Stage-1 order
    finally:
        mem.close()


@pytest.mark.parametrize("group", ["sensory", "ltm"])
def test_the_sensory_and_ltm_nodes_take_their_defaults_from_the_dataclasses(group):
    import dataclasses

    from omegaconf import OmegaConf

    from lightmem.config.schemas import NODE_SWITCHES
    from lightmem.config.specs import build_spec
    from lightmem.ltm import LTMOptions
    from lightmem.sensory.pipeline import SensorySpec

    cls = {"sensory": SensorySpec, "ltm": LTMOptions}[group]
    node = compose("locomo", [f"{group}=lightmem"])[group]
    built = build_spec(cls, {k: v for k, v in OmegaConf.to_container(node).items() if k not in NODE_SWITCHES})
    defaults = cls()
    for f in dataclasses.fields(cls):  # no YAML value differs from the dataclass unless it says so
        if f.name not in ("nlp", "llm"):
            assert getattr(built, f.name) == getattr(defaults, f.name), f.name

    def leaves(d, prefix=""):
        for k, v in d.items():
            yield from leaves(v, f"{prefix}{k}.") if isinstance(v, dict) and "_target_" not in v else [(prefix + k, v)]

    schema = OmegaConf.to_container(compose("locomo", [f"{group}=none"])[group])
    flat = dict(leaves(schema))
    for name in sorted((ROOT / "conf" / group).rglob("*.yaml")):  # every value a YAML sets differs from the default
        for key, value in leaves(OmegaConf.to_container(OmegaConf.load(name))):
            if key not in ("defaults", "enabled") and key in flat and not isinstance(value, dict):  # enabled: the option
                assert value != flat[key], f"{name.name} restates {key}={value!r}"
    tweaked = compose("locomo", [f"{group}=lightmem", f"{group}.{'segment.layers=[-2,-1]' if group == 'sensory' else 'consolidation.queue.k=5'}"])
    spec = build_spec(cls, {k: v for k, v in OmegaConf.to_container(tweaked[group]).items() if k not in NODE_SWITCHES})
    assert (spec.segment.layers == (-2, -1)) if group == "sensory" else (spec.consolidation.queue.k == 5)
    with pytest.raises(TypeError, match="no setting"):
        build_spec(cls, {"nonexistent": 1})


def test_the_ltm_abstractor_is_chosen_from_a_table_that_says_what_it_needs():
    from lightmem.ltm.abstraction import ABSTRACTORS, ExtractiveAbstractor, GenerativeAbstractor
    from lightmem.ltm.deidentify import Deidentifier

    assert not ABSTRACTORS["extractive"].needs_llm and ABSTRACTORS["generative"].needs_llm
    assert isinstance(ABSTRACTORS["extractive"].build(None, None, Deidentifier()), ExtractiveAbstractor)
    assert isinstance(ABSTRACTORS["generative"].build(None, object(), Deidentifier()), GenerativeAbstractor)


def test_composing_shares_the_config_store_and_still_sees_a_schema_stored_later():
    """Each compose deep-copies Hydra's repository; the ConfigStore in it is the live one (not a copy of every
    schema), so a schema stored after an earlier compose is found, and a composed config edited in place
    leaves the stored node as it was."""
    import copy
    from dataclasses import dataclass

    from hydra.core.config_store import ConfigStore

    first = compose("locomo", [])
    store = ConfigStore.instance()
    assert copy.deepcopy(store) is store and copy.deepcopy({"s": store})["s"] is store

    @dataclass
    class Late:
        late_value: int = 7

    store.store(name="late_test_config", node=Late)
    try:
        cfg = compose("late_test_config", [])
        assert cfg.late_value == 7
        cfg.late_value = 8
        assert compose("late_test_config", []).late_value == 7
    finally:
        del store.repo["late_test_config.yaml"]
    assert compose("locomo", []) == first
