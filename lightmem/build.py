"""The one construction path of a ``Memory``, from typed parts.

``Memory.open`` (Python), ``lightmem.config.build_memory`` (Hydra config), the ``lightmem`` command and
the servers all build a Memory from ``memory_parts``; the embedder choice of a store (``new_embedder``,
``resolve_embedder``) and the LTM options are made here once, whatever the caller. This module builds the
parts and never imports ``lightmem.memory`` (which imports it). No Hydra here: config nodes are mapped in
``lightmem.config``.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightmem.errors import InvalidInputError, LightMemError
from lightmem.ltm import LTMOptions, build_ltm
from lightmem.models.embedder import Embedder
from lightmem.models.prompt_tokens import DEFAULT_TOKENIZER, prompt_counter
from lightmem.models.tokens import TokenCounter
from lightmem.models.word_scorer import WordScorer, default_word_scorer
from lightmem.retrieval.composer import DEFAULT_BUDGET, ContextComposer
from lightmem.retrieval.engine import TwoStageRetriever
from lightmem.retrieval.spec import retrieval_specs
from lightmem.retrieval.stage2 import Selector, default_selector
from lightmem.roles.controller import Controller
from lightmem.roles.maintenance import Maintainer
from lightmem.roles.writer import Writer
from lightmem.sensory.pipeline import SensoryStage
from lightmem.stores.base import DEFAULT_CAPACITY, MemoryStore
from lightmem.stores.factory import open_store
from lightmem.validation import MAX_TURN_CHARS

# Named embedders a new store can be built with (besides "tuned", the default: all-mpnet-base-v2 with the
# trained memory adapter of checkpoints/embedder); each is rebuilt by its stored name.
ENCODERS = {"minilm": "all-MiniLM-L6-v2", "mpnet": "all-mpnet-base-v2", "hashing": "hashing-256"}
# Every encoder choice the CLI, the server and MCP offer, the default first.
ENCODER_CHOICES = ("tuned", *sorted(ENCODERS))


def encoder_kind(name: str) -> str:
    """The encoder choice (``tuned`` or a key of ``ENCODERS``) a stored embedder name corresponds to."""
    if name.startswith("hashing-"):
        return "hashing"
    if "+lora-" in name:
        return "tuned"
    base = name.split("+", 1)[0]  # the model, before the +len / +int8 suffixes
    return next((kind for kind, model in ENCODERS.items() if model == base), "minilm")


def _check_choice(encoder: str | None) -> None:
    if encoder is not None and encoder not in ENCODER_CHOICES:
        raise LightMemError(f"unknown encoder {encoder!r}; choose one of {list(ENCODER_CHOICES)} or leave it out (tuned)")


def new_embedder(encoder: str | None = None) -> Embedder:
    """The embedder a new store gets for an encoder choice (None or ``tuned``: the default), built as
    ``Memory.open`` builds its default: 128 tokens per text, int8 ONNX on the CPU, torch on a GPU. The one
    place the CLI, the server, MCP and Python turn a name into an encoder.

    Raises:
        LightMemError: an unknown choice, or ``tuned`` without the trained adapter.
    """
    from lightmem.models.embedder import (
        HashingEmbedder,
        SentenceTransformerEmbedder,
        default_encoding,
        tuned_adapter,
        tuned_embedder,
    )

    _check_choice(encoder)
    if encoder == "tuned" and tuned_adapter() is None:
        raise LightMemError("--encoder tuned needs the trained adapter in checkpoints/embedder (set LIGHTMEM_CHECKPOINTS "
                            "or run `make train`); --encoder mpnet is its base model")
    if encoder in (None, "tuned"):
        return tuned_embedder()
    if encoder == "hashing":
        return HashingEmbedder(int(ENCODERS["hashing"].removeprefix("hashing-")))
    return SentenceTransformerEmbedder(ENCODERS[encoder], **default_encoding())


def resolve_embedder(location: str | Path, encoder: str | None = None, *, python: bool = False) -> Embedder:
    """The embedder of the store at ``location``: the one that wrote it; for a new store (or one that records no
    embedder, ``unknown``) ``encoder`` (``new_embedder``; None: the tuned default). The one place the embedder of a
    store is chosen, for Python, the CLI and the servers. ``python``: the messages name ``encoder=`` rather than
    ``--encoder`` (``memory_parts``).

    Raises:
        LightMemError: an unknown ``encoder``, one that is not the one that wrote the store, or ``tuned``
            asked without the trained adapter.
    """
    from lightmem.models.embedder import embedder_for
    from lightmem.stores.factory import describe, stored_embedder

    _check_choice(encoder)
    stored = stored_embedder(location)
    if encoder and stored and encoder_kind(stored) != encoder:
        fix = ("leave encoder= out (the store's own encoder is used) or open a new store" if python
               else "drop --encoder or use a new --store")
        raise LightMemError(f"{describe(location)} was built with {stored} (encoder {encoder_kind(stored)!r}), "
                            f"not {encoder!r}: {fix}")
    if stored and stored != "unknown":
        return embedder_for(stored)
    return new_embedder(encoder)


def memory_parts(
    path: str | Path | MemoryStore,
    embedder: Embedder | None = None,
    selector: Selector | None = None,
    controller: Controller | None = None,
    writer: Writer | None = None,
    maintainer: Maintainer | None = None,
    k: int = 10,
    budget: int = DEFAULT_BUDGET,
    capacity: int = DEFAULT_CAPACITY,
    retrieval: Mapping[str, Any] | None = None,
    sensory_stage: SensoryStage | None = None,
    ltm: LTMOptions | None = None,
    word_scorer: WordScorer | str | None = None,
    tokenizer: str | TokenCounter | None = DEFAULT_TOKENIZER,
    group_dates: bool = True,
    max_turn_chars: int = MAX_TURN_CHARS,
    background_index: bool | None = None,
    index_here: bool = True,
    encoder: str | None = None,
    **store_kwargs: Any,
) -> dict[str, Any]:
    """Open (or create) a store and make the parts of a Memory over it: the keyword arguments of
    ``Memory(...)``, which ``Memory.open`` passes on. Every part left out is the default CPU pipeline's.

    Args:
        path: Store folder (or ``.sqlite`` file), created when missing; or a PostgreSQL
            database, ``postgresql://user:password@host/db`` (needs the ``postgres`` extra); or a store
            already opened (the Hydra builder's ``store`` node), which then takes no store settings.
        embedder: Defaults to the embedder that wrote the store; for a new store the packaged
            all-mpnet-base-v2 with the trained memory adapter of checkpoints/embedder. To choose one by
            name instead, pass ``encoder``.
        selector: Stage-2 selector; defaults to the learned ranker of checkpoints/ranker_trees
            (``Stage1Selector()`` keeps the Stage-1 order and loads no model).
        controller: Defaults to the raw query as the single HQ.
        writer: Defaults to one item per turn, its chit-chat sentences left out (the turn is stored whole).
        maintainer: Online maintenance after writes; none by default.
        k: Default number of items ``search`` returns.
        budget: Default prompt budget of ``build_context`` (tokens).
        capacity: Active items per user before the least retained are archived.
        retrieval: Retrieval settings by name (fusion, weights, candidate_factor, whole_share...: the fields of
            ``Stage1Spec`` and ``PackingSpec`` in ``lightmem/retrieval/spec.py``).
        sensory_stage: Sensory stages and STM buffer before the Writer (compression, topic
            segmentation, gates, normalization); none by default: the Writer gets raw turns.
        ltm: Long-term memory: the de-identified knowledge graph, its offline consolidation
            (in a background thread unless ``background=False``) and LTM routing of
            search. None by default: MTM only.
        word_scorer: Scores each new memory's words for keeping, so that Stage 2 can squeeze the
            excerpts in the tail of a budget (``retrieval.excerpt_rate``); ``"default"``: the trained
            word scorer of checkpoints/word_scorer (loaded once per process). None (the default): no scores;
            the default packing (``whole_share=1.0``) packs whole memories only and never reads them.
        tokenizer: What a prompt budget is counted with (``build_context`` and ``search(budget=)``): the
            default reader's tokenizer (``qwen2.5``, packaged), ``embedder``, a tokenizer file or folder, or a
            ``TokenCounter`` (``lightmem.models.prompt_tokens``).
        group_dates: The prompt shows memories grouped under one date line per day, in time order; False:
            each memory line carries its own date, in rank order (``ContextComposer``).
        max_turn_chars: The longest turn ``add`` takes, in characters (text or image caption): longer ones
            are refused with ``InvalidInputError`` (HTTP 422), never cut.
        background_index: ``add`` stores a turn and its words and returns; a background thread embeds the new
            memories (``Memory.flush_index`` waits for it; a restart resumes it). False: ``add`` embeds before it
            returns (on either backend). A ``maintainer`` always embeds before ``add`` returns. None (the
            default): True, unless the environment sets ``LIGHTMEM_BACKGROUND_INDEX=0`` (a script that searches
            right after each write, or a test suite that wants every vector in place when ``add`` returns).
        index_here: With background indexing on a PostgreSQL store, this process claims jobs from the store's shared
            queue and embeds them (True, the default), or only writes and leaves the embedding to other processes:
            ``lightmem worker``, other servers (False). Either way a job whose holder dies is taken by another
            process once its lease runs out. The embedded store always embeds in the writing process. With LTM in
            the background, the same holds for consolidation cycles (``ltm.queue_scheduler``): False only requests
            them, for ``lightmem worker --consolidate``.
        encoder: The encoder by the name the CLI's ``--encoder``, the server and MCP take: ``tuned`` (the
            default: all-mpnet-base-v2 with the trained adapter), ``mpnet``, ``minilm`` or ``hashing`` (no model:
            a feature-hashed bag of words, for tests and tiny machines). Resolved as the CLI resolves it
            (``resolve_embedder``): a new store is built with it; an existing store reopens with the embedder
            that wrote it, and naming another one raises ``LightMemError`` (a store's vectors are only
            comparable with its own encoder's). Not with ``embedder`` (``InvalidInputError``), nor with an
            opened store.
        **store_kwargs: Keyword arguments of the store (``SQLiteStore``: index, synchronous...;
            ``PostgresStore``: index, ef_search...).
    """
    if encoder is not None:
        if embedder is not None:
            raise InvalidInputError(f"pass embedder= or encoder= (a name: {', '.join(ENCODER_CHOICES)}), not both: "
                                    f"encoder={encoder!r} names the embedder that embedder= gives")
        if isinstance(path, MemoryStore):
            raise InvalidInputError("an opened store comes with its embedder: pass it as embedder=, not encoder=")
        if not isinstance(encoder, str):
            raise InvalidInputError(f"encoder must be a name, one of {list(ENCODER_CHOICES)}, got {type(encoder).__name__}")
        embedder = resolve_embedder(path, encoder, python=True)
    if isinstance(path, MemoryStore):
        if embedder is None or store_kwargs or capacity != DEFAULT_CAPACITY:
            raise ValueError("an opened store comes with its settings: pass its embedder and no store options")
        store = path
    else:
        if embedder is None:
            embedder = resolve_embedder(path, python=True)
        store = open_store(path, dim=embedder.dim, embedder=embedder.name, capacity=capacity, **store_kwargs)
    runtime = build_ltm(store, embedder, ltm, run_jobs=index_here) if ltm is not None else None
    routing = {} if ltm is None else {"routing": ltm.routing, "cross_share": ltm.cross_share, "ltm_hops": ltm.hops}
    composer = ContextComposer(prompt_counter(tokenizer, embedder), budget, group_dates=group_dates)
    stage1, packing, routing_spec = retrieval_specs({**dict(retrieval or {}), **routing})
    retriever = TwoStageRetriever(store, embedder, selector or default_selector(), stage1, packing, routing_spec,
                                  ltm=runtime.graph if runtime is not None else None, composer=composer)
    counter = embedder.token_counter()
    if background_index is None:
        background_index = os.environ.get("LIGHTMEM_BACKGROUND_INDEX", "1").strip().lower() not in ("0", "false", "no", "off")
    if isinstance(word_scorer, str):
        if word_scorer != "default":
            raise ValueError(f"word_scorer must be a WordScorer, None or 'default', got {word_scorer!r}")
        word_scorer = default_word_scorer()
    return {"store": store, "embedder": embedder, "retriever": retriever, "composer": composer, "controller": controller,
            "writer": writer, "maintainer": maintainer, "counter": counter, "k": k, "sensory_stage": sensory_stage,
            "ltm": runtime, "word_scorer": word_scorer, "max_turn_chars": max_turn_chars,
            "background_index": background_index, "index_here": index_here}
