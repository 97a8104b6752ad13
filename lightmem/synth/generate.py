"""The synthetic dataset: users → graphs → dialogues → (Query, Subgraph, Path) samples, split by user."""
from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from tqdm import tqdm

from lightmem.synth.dialogue import render
from lightmem.synth.graph import FIRST_NAMES, generate_graph
from lightmem.synth.queries import CATEGORY, make_queries, subgraph_candidates, to_sample


@dataclass
class SynthSpec:
    """What to generate. ``n_samples`` is spread over users of ~``queries_per_user`` samples each."""

    n_samples: int = 2000
    seed: int = 0
    queries_per_user: int = 20
    n_people: int = 5
    n_events: int = 4
    n_lists: int = 0  # categories of list questions per user (graph.LISTS); 0: none
    n_sessions: int = 6
    n_candidates: int = 20  # 2K for K = 10
    n_hard: int = 8
    chitchat: float = 0.5
    splits: tuple[float, float, float] = (0.8, 0.1, 0.1)  # train / val / test, by user
    start: str = "2022-01-01"


def _split_of(i: int, n_users: int, fracs: tuple[float, float, float]) -> str:
    a = round(n_users * fracs[0])
    b = a + max(1, round(n_users * fracs[1])) if fracs[1] > 0 else a
    return "train" if i < a else "val" if i < b else "test"


def generate(spec: SynthSpec, show_progress: bool = False) -> tuple[dict[str, list[dict]], dict[str, list[dict]]]:
    """Return (samples by split, LoCoMo-format conversations by split). Same spec, same output."""
    rng = random.Random(spec.seed)
    n_users = max(3, -(-spec.n_samples // spec.queries_per_user))
    t0 = datetime.fromisoformat(spec.start).replace(tzinfo=timezone.utc).timestamp()
    samples: dict[str, list[dict]] = {"train": [], "val": [], "test": []}
    convs: dict[str, list[dict]] = {"train": [], "val": [], "test": []}
    left = spec.n_samples
    for i in tqdm(range(n_users), desc="synth users", disable=not show_progress):
        urng = random.Random(rng.getrandbits(64))  # one stream per user: a user's data never depends on another's
        gender = urng.choice("fm")
        user = urng.choice(FIRST_NAMES[gender])
        partner = urng.choice([n for n in FIRST_NAMES["f"] + FIRST_NAMES["m"] if n != user])
        start = t0 + urng.uniform(0, 730) * 86400
        g = generate_graph(urng, user, gender, start, 120, spec.n_people, spec.n_events, spec.n_lists)
        conv_id = f"synth-{spec.seed}-{i}"
        r = render(g, urng, conv_id, partner, start, spec.n_sessions, spec.chitchat)
        qs = make_queries(g, r.facts, urng)
        urng.shuffle(qs)
        qs = qs[: max(0, min(spec.queries_per_user, left))]
        left -= len(qs)
        split = _split_of(i, n_users, spec.splits)
        qa = []
        for j, q in enumerate(qs):
            cands = subgraph_candidates(q, g, r, urng, spec.n_candidates, spec.n_hard)
            samples[split].append(to_sample(q, g, r, conv_id, j, cands))
            qa.append({"question": q.text, "answer": q.answer, "evidence": [r.fact_turn[f.fid] for f in q.path],
                       "category": CATEGORY[q.kind]})
        r.conversation["qa"] = qa
        convs[split].append(r.conversation)
    return samples, convs


def data_card(spec: SynthSpec, samples: dict[str, list[dict]], convs: dict[str, list[dict]], files: dict[str, str]) -> dict:
    """Counts, hop and kind histograms, candidates per sample, the seed and file hashes."""
    allq = [s for v in samples.values() for s in v]
    return {
        "generator": "lightmem.synth", "spec": {k: getattr(spec, k) for k in spec.__dataclass_fields__},
        "samples": {k: len(v) for k, v in samples.items()}, "conversations": {k: len(v) for k, v in convs.items()},
        "hops": dict(sorted(Counter(s["hops"] for s in allq).items())), "kinds": dict(Counter(s["kind"] for s in allq)),
        "candidates_per_sample": sum(len(s["candidates"]) for s in allq) / max(1, len(allq)),
        "positives_per_sample": sum(c["label"] for s in allq for c in s["candidates"]) / max(1, len(allq)),
        "sha256": files,
    }


def write(spec: SynthSpec, out_dir: str | Path, show_progress: bool = False) -> dict:
    """Write ``{split}.jsonl``, ``{split}_locomo.json`` and ``data_card.json``; return the card."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    samples, convs = generate(spec, show_progress)
    hashes = {}
    for split in samples:
        body = "".join(json.dumps(s) + "\n" for s in samples[split])
        (out / f"{split}.jsonl").write_text(body)
        (out / f"{split}_locomo.json").write_text(json.dumps(convs[split], indent=1))
        hashes[f"{split}.jsonl"] = hashlib.sha256(body.encode()).hexdigest()
    card = data_card(spec, samples, convs, hashes)
    (out / "data_card.json").write_text(json.dumps(card, indent=2))
    return card
