"""Request and response bodies of the HTTP API (and the MCP tools' results)."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    StringConstraints,
    field_validator,
    model_validator,
)

from lightmem.batch import MAX_BATCH_OPS, MAX_TURNS_PER_REQUEST
from lightmem.types import ComposedContext, HistoryEvent, Hit, MemoryItem
from lightmem.validation import (
    MAX_BUDGET,
    MAX_ID_CHARS,
    MAX_K,
    MAX_METADATA_BYTES,
    MAX_METADATA_DEPTH,
    MAX_METADATA_KEYS,
    json_depth,
)

MAX_LIMIT = 1000  # memories in one listing
MAX_OFFSET = 2**31 - 1  # a listing's offset: more items than any store holds, less than any database's integer

UserId = Annotated[str, StringConstraints(min_length=1, max_length=MAX_ID_CHARS, pattern=r"\S")]
# Speakers, turn and session ids: names, bounded as the Python API bounds them (lightmem.validation).
Name = Annotated[str, StringConstraints(min_length=1, max_length=MAX_ID_CHARS)]
USER_DOC = "The user whose memories these are: the partition, never a filter."
Text = Annotated[str, StringConstraints(min_length=1, pattern=r"\S")]
# A Unix time (seconds) or a date string lightmem parses ("1:56 pm on 8 May, 2023", ISO 8601...).
# Strict: a boolean is neither (pydantic's lax mode would read true as 1970-01-01T00:00:01).
Timestamp = StrictStr | StrictInt | StrictFloat
# Metadata is bounded where Memory checks it (lightmem.validation.check_metadata): a request over the bound is a 422
# naming the limit, as from Python. The schema says the bound; the check stays in one place.
METADATA_DOC = (f"A JSON object: at most {MAX_METADATA_DEPTH} levels deep, {MAX_METADATA_KEYS:,} keys in all and "
                f"{MAX_METADATA_BYTES // 1024} KiB as JSON; more is refused with 422.")
# What a memory's answer shows instead of the part of its metadata nested deeper than MAX_METADATA_DEPTH: only a
# row written before the bound holds one (pydantic cannot serialise ~255 levels, so without the cut every read of
# it answered 500). The stored row is unchanged: Python's Memory.get returns it whole, a PATCH replaces it.
METADATA_CUT = f"<not shown: nested deeper than {MAX_METADATA_DEPTH} levels>"


def _whole_number(value: object) -> object:
    """A count as JSON may write it (5 or 5.0), never a boolean: lax int reads true as 1."""
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number: give a whole number")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# Counts, bounded (the bounds are in the OpenAPI schema: the validator comes after them), and strict wherever
# they are used (the MCP tools' arguments too): "5" is no number.
K = Annotated[int, Strict(), Field(ge=1, le=MAX_K), BeforeValidator(_whole_number)]
Budget = Annotated[int, Strict(), Field(ge=1, le=MAX_BUDGET), BeforeValidator(_whole_number)]
Limit = Annotated[int, Strict(), Field(ge=1, le=MAX_LIMIT), BeforeValidator(_whole_number)]
Offset = Annotated[int, Strict(), Field(ge=0, le=MAX_OFFSET), BeforeValidator(_whole_number)]
# A search's threshold: a JSON number (not a string, not a boolean). Its range is the server's scores' (it depends on
# the retrieval settings), checked with NaN and infinity where Python's is (lightmem.validation.check_threshold): 422.
Threshold = Annotated[float, Strict()]
THRESHOLD_DOC = (
    "Only hits whose score is above this are returned, so fewer than k may come back, or none; null (the default): "
    "the best k whatever they score. A score is the first retrieval stage's evidence, not a probability: with the "
    "default settings the cosine of the query's and the memory's vectors (-1 to 1) plus 0.5 x its BM25 over the best "
    "match's (0 to 1) plus 0.1 for a matching tag, so -1 to 1.6. 0 drops the hits with no evidence at all (no shared "
    "word, no tag, a vector pointing away or not written yet); with the default encoder 0.3 also drops memories "
    "neither worded nor meant like the query. A value outside the server's range of scores is refused with 422.")


class _Request(BaseModel):
    # extra="forbid": a misspelt field is an error, not silently ignored. strict: a value of
    # another JSON type than the schema's is refused, not coerced ("yes" is no boolean, "5" no number).
    model_config = ConfigDict(extra="forbid", strict=True)


class Message(_Request):
    speaker: Name = Field(examples=["Caroline"])
    text: Text = Field(examples=["I went to a LGBTQ support group yesterday."])
    timestamp: Timestamp | None = Field(None, description="When it was said; defaults to now.")
    id: Name | None = Field(
        None, description="Turn id: a retried request with the same ids stores nothing twice.")
    metadata: dict[str, Any] | None = Field(None, description="The turn's own metadata, stored with it. " + METADATA_DOC)


# MAX_TURNS_PER_REQUEST (lightmem.batch): turns one POST /v1/memories may carry, and turns plus changed memories
# one POST /v1/batch may (summed over its operations). The request commits them in one transaction, and its vectors
# are written after it returns (the background indexer), so this bounds the time a request holds its worker.


# The names of lightmem.write_policy.POLICIES (tests/test_write_policy.py checks they agree).
WritePolicyName = Literal["all", "agent"]
POLICY_DOC = ("Which messages become memories: 'all' (every one) or 'agent' (an agent's own exchange: questions, "
              "pleasantries, answers and restatements of stored memories are kept as turns but not written as memories).")


class AddRequest(_Request):
    user_id: UserId = Field(description=USER_DOC, examples=["alice"])
    messages: list[Message] = Field(min_length=1, max_length=MAX_TURNS_PER_REQUEST,
                                    description=f"At most {MAX_TURNS_PER_REQUEST:,} turns; send more in several requests.")
    session_id: Name | None = None
    policy: WritePolicyName = Field("all", description=POLICY_DOC)


class SearchFilters(_Request):
    time_from: Timestamp | None = None
    time_to: Timestamp | None = None
    kinds: list[Literal["episodic", "abstract", "knowledge"]] | None = None
    tags: list[str] | None = None
    include_superseded: bool = False
    metadata: dict[str, Any] | None = Field(
        None, description='Only memories whose metadata passes: {"field": value} or {"field": {"$op": value}} with '
                          "$eq $ne $gt $gte $lt $lte; a dotted field names a nested one.",
        examples=[{"topic": "sport", "rank": {"$gte": 3}}])


class SearchRequest(_Request):
    user_id: UserId = Field(description=USER_DOC, examples=["alice"])
    query: Text
    k: K | None = Field(None, description="How many hits (default: the server's K).")
    filters: SearchFilters | None = None
    budget: Budget | None = Field(None, description="Prompt tokens of memory lines (dates included, the reader's tokenizer): the best set that fits, instead of K hits.")
    threshold: Threshold | None = Field(None, description=THRESHOLD_DOC, examples=[0.3])


class ContextRequest(_Request):
    user_id: UserId = Field(description=USER_DOC, examples=["alice"])
    query: Text
    budget: Budget | None = Field(None, description="Tokens of the whole prompt as the reader's tokenizer counts them (default: the server's).")
    stm: list[str] = Field(default_factory=list, description="Recent turns of the conversation, oldest first.")
    k: K | None = Field(None, description="Pack the best k memories (default: Stage 2 fills what the question and "
                                          "the recent turns leave of the budget).")
    filters: SearchFilters | None = None


class UpdateRequest(_Request):
    text: Text | None = Field(None, description="New text (re-embedded). It replaces the old one for good unless "
                                                  "keep_history is true.")
    topic: str | None = None
    metadata: dict[str, Any] | None = Field(None, description="Replaces the memory's metadata; the keys lightmem keeps "
                                                               "there itself (a put's key, word scores, an abstract's "
                                                               "members) stay as they are. " + METADATA_DOC)
    keep_history: StrictBool = Field(False, description="Keep the old text readable in the memory's history.")

    @model_validator(mode="after")
    def _something_to_change(self) -> "UpdateRequest":
        if self.text is None and self.topic is None and self.metadata is None:
            raise ValueError("give at least one of text, topic, metadata")
        return self


class BatchAdd(_Request):
    op: Literal["add"]
    user_id: UserId = Field(description=USER_DOC)
    messages: list[Message] = Field(min_length=1, max_length=MAX_TURNS_PER_REQUEST)
    session_id: Name | None = None
    policy: WritePolicyName = Field("all", description=POLICY_DOC)


class BatchUpdate(UpdateRequest):
    op: Literal["update"]
    user_id: UserId = Field(description=USER_DOC)
    item_id: Name


class BatchDelete(_Request):
    op: Literal["delete"]
    user_id: UserId = Field(description=USER_DOC)
    item_id: Name


BatchOp = Annotated[BatchAdd | BatchUpdate | BatchDelete, Field(discriminator="op")]


class BatchRequest(_Request):
    ops: list[BatchOp] = Field(min_length=1, max_length=MAX_BATCH_OPS,
                               description=f"At most {MAX_BATCH_OPS:,} operations, run in order; each carries the "
                                           f"fields of its single-call route. At most {MAX_TURNS_PER_REQUEST:,} turns "
                                           "and changed memories in all (an add counts its turns, an update or a "
                                           "deletion 1).")
    atomic: StrictBool = Field(False, description="All operations commit together or none does (the first error "
                                                  "answers, naming its index); by default each commits on its own.")


class PutRequest(_Request):
    text: Text = Field(description="The memory's text, stored as given.")
    metadata: dict[str, Any] | None = Field(None, description="Comes back with the memory (its key added as "
                                                               "metadata.key). " + METADATA_DOC)
    timestamp: Timestamp | None = Field(None, description="When it was said or learned; defaults to now.")


class UsersOut(BaseModel):
    users: list[str]


class ErrorOut(BaseModel):
    """The body of every error answer (401, 403, 404, 413, 422)."""

    detail: str | list[dict[str, Any]] = Field(
        description="What is wrong: a sentence, or for a malformed body the list of bad fields (loc, msg, type).")
    message: str | None = Field(None, description="422: one line naming each bad field, and what to do.")


class MemoryOut(BaseModel):
    id: str
    user_id: str
    text: str
    provenance: list[str] = Field(description="Ids of the turns the memory was written from.")
    kind: str
    event_time: float
    created_at: float
    updated_at: float = Field(description="When its text, fields or archived state last changed (created_at until then).")
    topic: str | None
    entities: list[str]
    archived: bool
    superseded_by: str | None
    metadata: dict[str, Any] = Field(description=f"Parts nested deeper than {MAX_METADATA_DEPTH} levels (only in a "
                                                 f"memory stored before that bound) show as {METADATA_CUT!r}.")

    @field_validator("metadata", mode="before")
    @classmethod
    def _servable(cls, meta: Any) -> Any:
        """The metadata as it can be served: within the depth bound, as stored; deeper parts cut (METADATA_CUT)."""
        if json_depth(meta, MAX_METADATA_DEPTH) <= MAX_METADATA_DEPTH:
            return meta
        return _cut(meta, 1)

    @classmethod
    def of(cls, item: MemoryItem) -> "MemoryOut":
        return cls(id=item.id, user_id=item.user_id, text=item.text, provenance=list(item.provenance), kind=item.kind.value,
                   event_time=item.event_time, created_at=item.created_at,
                   updated_at=item.updated_at if item.updated_at is not None else item.created_at,
                   topic=item.topic, entities=list(item.entities),
                   archived=item.archived, superseded_by=item.superseded_by, metadata=dict(item.metadata))


def _cut(value: Any, level: int) -> Any:
    """``value`` (at nesting ``level``) with every object or array deeper than ``MAX_METADATA_DEPTH`` replaced by
    ``METADATA_CUT``; recursion never goes past that depth."""
    if isinstance(value, dict | list | tuple) and level > MAX_METADATA_DEPTH:
        return METADATA_CUT
    if isinstance(value, dict):
        return {k: _cut(v, level + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_cut(v, level + 1) for v in value]
    return value


class HitOut(BaseModel):
    id: str
    text: str
    score: float
    scores: dict[str, float] = Field(description="The score of each retrieval signal.")
    provenance: list[str]
    event_time: float
    kind: str
    metadata: dict[str, Any] = Field(default_factory=dict, description="The memory's metadata, as MemoryOut shows it.")

    @classmethod
    def of(cls, hit: Hit) -> "HitOut":
        it = hit.item
        return cls(id=it.id, text=it.text, score=hit.score, scores=dict(hit.scores), provenance=list(it.provenance),
                   event_time=it.event_time, kind=it.kind.value, metadata=MemoryOut._servable(it.metadata))


class ItemsOut(BaseModel):
    items: list[MemoryOut]


class HitsOut(BaseModel):
    hits: list[HitOut]


class ContextOut(BaseModel):
    prompt: str
    n_tokens: int
    budget: int
    memory_ids: list[str] = Field(description="The memories packed into the prompt, in prompt order.")
    ranked_ids: list[str] = Field(default_factory=list, description="The same memories in rank order (the order the "
                                  "budget packed them).")
    stm_turns_kept: int
    dropped_memories: int

    @classmethod
    def of(cls, ctx: ComposedContext) -> "ContextOut":
        return cls(prompt=ctx.prompt, n_tokens=ctx.n_tokens, budget=ctx.budget,
                   memory_ids=[m.id for m in ctx.in_prompt_order()], ranked_ids=[m.id for m in ctx.memories],
                   stm_turns_kept=ctx.stm_turns_kept, dropped_memories=ctx.dropped_memories)


class HistoryEventOut(BaseModel):
    event: str
    old_text: str | None
    new_text: str | None
    at: float

    @classmethod
    def of(cls, ev: HistoryEvent) -> "HistoryEventOut":
        return cls(event=ev.event, old_text=ev.old_text, new_text=ev.new_text, at=ev.at)


class HistoryOut(BaseModel):
    id: str
    events: list[HistoryEventOut]


class BatchResultOut(BaseModel):
    index: int
    op: Literal["add", "update", "delete"]
    status: Literal["ok", "not_found", "failed", "not_attempted"] = Field(
        description="ok; not_found (no such memory of the user); failed (the store failed: the batch stopped here); "
                    "not_attempted (after a failure)")
    items: list[MemoryOut] | None = Field(None, description="An add's memories.")
    item: MemoryOut | None = Field(None, description="An update's memory.")
    removed: dict[str, int] | None = Field(None, description="A deletion's counts.")
    error: str | None = None

    @classmethod
    def of(cls, result: dict[str, Any]) -> "BatchResultOut":
        out = dict(result)
        if "items" in out:
            out["items"] = [MemoryOut.of(i) for i in out["items"]]
        if "item" in out:
            out["item"] = MemoryOut.of(out["item"])
        return cls(**out)


class BatchOut(BaseModel):
    results: list[BatchResultOut]


class DeletedOut(BaseModel):
    id: str
    deleted: bool = True
    removed: dict[str, int] = Field(default_factory=dict,
                                    description="What was erased: the item, and its source turns no other memory cites.")


class UserDeletedOut(BaseModel):
    user_id: str
    removed: dict[str, int] = Field(description="Rows removed per table (turns, items, history...).")
