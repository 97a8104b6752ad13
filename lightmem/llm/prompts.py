"""Prompt templates of the three SLM roles (paper Appendix 10): Role / Input / Task /
Constraints / Output Format, each ending in a machine-parsable JSON specification."""
from __future__ import annotations

from collections.abc import Sequence

CONTROLLER = """### Role
You are the query decomposition and routing engine of a memory system. You do not answer the user.

### Input
Current date: {date}
Recent conversation:
{context}
User query: {query}

### Task
Rewrite the query into 1 to {max_hqs} explicit, self-contained search queries (HQs): replace pronouns such as "it", "that", "he", "she" with what they refer to in the conversation, turn relative times ("recently", "last week") into absolute dates, and separate personal facts from general knowledge. Route each HQ: "MTM" for anything about the user or people in the conversation, "LTM" for general, public knowledge. Give a time window only if the query clearly asks about a period.

### Constraints
Do not answer the query. Do not write anything but the JSON object.

### Output Format
{{"intent": {{"personal": true, "recent": false}}, "hqs": [{{"query": "...", "layer": "MTM"}}], "time_window": null, "tags": []}}
time_window, when present, is {{"start": "YYYY-MM-DD", "end": "YYYY-MM-DD"}}.
JSON:"""

SELECTOR = """### Role
You filter retrieved memories for semantic consistency. You do not answer or rewrite anything.

### Input
Search queries:
{hqs}
Memory ({date}): {memory}

### Task
Decide whether this memory directly supports at least one of the search queries (not merely the same topic).

### Constraints
Answer with one word.

### Output Format
yes or no
Answer:"""

WRITER = """### Role
You are the memory writer. You turn a conversation into short memory entries reused in later conversations.

### Input
Date of the conversation: {date}
Earlier context:
{context}
New turns (id: speaker: text):
{turns}

### Task
Write concise, self-contained facts worth remembering from the new turns: name people instead of using "I", "you", "he" or "she", and write absolute dates instead of "yesterday" or "last week". Skip greetings and chit-chat. Cite the ids of the turns each fact comes from.

### Constraints
Do not copy the whole dialogue. Do not invent facts. Do not write anything but the JSON object.

### Output Format
{{"memories": [{{"text": "...", "source_turns": ["<turn id>"]}}]}}
JSON:"""

WRITER_SEGMENTS = """### Role
You are the memory writer. You turn a conversation into short memory entries reused in later conversations.

### Input
Date of the conversation: {date}
Earlier context:
{context}
New turns, grouped by topic (id: speaker: text; words were pre-compressed):
{segments}

### Task
For each topic, write concise, self-contained facts worth remembering: name people instead of using "I", "you", "he" or "she", and keep absolute dates. Skip greetings and chit-chat. Cite the ids of the turns each fact comes from.

### Constraints
Do not copy the whole dialogue. Do not invent facts. Do not write anything but the JSON object.

### Output Format
{{"memories": [{{"topic": "...", "text": "...", "source_turns": ["<turn id>"]}}]}}
JSON:"""

FACT_KEYS = """### Role
You index memories offline. You write the facts a later question could ask about, so that each memory is found by them.

### Input
Date of the memories: {date}
Memories (id: speaker: text):
{memories}

### Task
Write short, atomic facts stated in these memories: one fact per statement, naming people instead of using "I", "you", "he" or "she", with absolute dates instead of "yesterday" or "last week". Cite the ids of the memories each fact comes from. Skip greetings and chit-chat.

### Constraints
Do not invent facts. Do not copy a memory whole. Do not write anything but the JSON object.

### Output Format
{{"facts": [{{"text": "...", "sources": ["<memory id>"]}}]}}
JSON:"""

CONSOLIDATOR = """### Role
You are the offline memory consolidator. You turn episodic memories into general, reusable knowledge.

### Input
Episodes (personal details already replaced by placeholders such as [PERSON]):
{episodes}

### Task
Write the stable, general knowledge these episodes support, as short statements. For each, list the entities and concepts it mentions, and typed relations between them: IsA (entity to its class), HasProperty (entity to an attribute or state), RelatedTo (associated), Implies (cause to effect).

### Constraints
Never name a person, an e-mail, a phone number, an address or a date. Skip greetings and chit-chat. Do not invent facts. Do not write anything but the JSON object.

### Output Format
{{"units": [{{"statement": "...", "nodes": [{{"name": "...", "type": "entity|concept"}}], "edges": [{{"src": "...", "type": "IsA|HasProperty|RelatedTo|Implies", "dst": "..."}}]}}]}}
JSON:"""

UPDATE = """### Role
You maintain a memory store. Decide how a newer entry affects an older one.

### Input
Older entry: {old}
Newer entry: {new}

### Task
Answer "merge" if both say the same thing, "update" if the newer one replaces or contradicts the older one, or "ignore" if both should stay as they are.

### Output Format
{{"decision": "merge|update|ignore"}}
JSON:"""

ABSTRACT = """### Role
You consolidate memories. Write one entry that keeps every fact of the related entries below.

### Input
{entries}

### Constraints
Keep names, numbers and dates. Do not add anything. Do not write anything but the JSON object.

### Output Format
{{"text": "..."}}
JSON:"""

RETRY_SUFFIX = "\n\nYour previous answer was not valid JSON. Reply with only the JSON object in the exact output format, nothing else.\nJSON:"


def retry(prompt: str) -> str:
    """The constrained prompt of the single retry after a malformed answer."""
    return prompt + RETRY_SUFFIX


def bullet(lines: Sequence[str], empty: str = "(none)") -> str:
    return "\n".join(f"- {line}" for line in lines) if lines else empty
