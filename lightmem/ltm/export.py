"""The LTM graph for inspection: networkx, JSON / GraphML files, and a rendered picture."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from lightmem.ltm.graph import KnowledgeGraph

EDGE_COLORS = {"IsA": "tab:blue", "HasProperty": "tab:green", "RelatedTo": "tab:gray", "Implies": "tab:red"}


def to_networkx(graph: KnowledgeGraph, include_dropped: bool = False) -> Any:
    """A ``networkx.MultiDiGraph`` of the graph: node and edge attributes are the stored ones."""
    import networkx as nx

    g = nx.MultiDiGraph()
    for n in graph.nodes(include_dropped):
        g.add_node(n.id, key=n.key, kind=n.kind.value, text=n.text, facts=" | ".join(n.facts), confidence=n.confidence,
                   evidence=n.evidence, first_seen=n.first_seen, last_seen=n.last_seen, active=n.active)
    for e in graph.edges(include_dropped):
        if e.src in g and e.dst in g:
            g.add_edge(e.src, e.dst, type=e.type.value, label=e.label, confidence=e.confidence, evidence=e.evidence)
    return g


def export_graph(graph: KnowledgeGraph, path: str | Path, include_dropped: bool = False) -> Path:
    """Write the graph as GraphML (``.graphml``) or JSON (anything else: node-link format)."""
    import networkx as nx

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    g = to_networkx(graph, include_dropped)
    if path.suffix.lower() == ".graphml":
        nx.write_graphml(g, path)
    else:
        path.write_text(json.dumps(nx.node_link_data(g, edges="edges"), indent=1))
    return path


def plot_graph(graph: KnowledgeGraph, path: str | Path, max_nodes: int = 60, seed: int = 0) -> Path:
    """Render the best-supported ``max_nodes`` nodes (by evidence, then confidence) and their links."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx

    g = to_networkx(graph)
    top = sorted(g.nodes, key=lambda n: (-g.nodes[n]["evidence"], -g.nodes[n]["confidence"]))[:max_nodes]
    sub = nx.DiGraph()
    for n in top:
        sub.add_node(n, **g.nodes[n])
    for a, b, d in g.edges(data=True):
        if a in sub and b in sub:
            sub.add_edge(a, b, **d)
    fig, ax = plt.subplots(figsize=(14, 10))
    if len(sub):
        pos = nx.spring_layout(sub, seed=seed, k=1.2 / max(1, len(sub)) ** 0.5)
        kinds = [sub.nodes[n]["kind"] for n in sub]
        top_ev = max(sub.nodes[n]["evidence"] for n in sub)
        sizes = [150 + 900 * math.log1p(sub.nodes[n]["evidence"]) / math.log1p(max(1, top_ev)) for n in sub]
        nx.draw_networkx_nodes(sub, pos, ax=ax, node_size=sizes, alpha=0.85,
                               node_color=["tab:orange" if k == "entity" else "tab:purple" for k in kinds])
        for et, color in EDGE_COLORS.items():
            edges = [(a, b) for a, b, d in sub.edges(data=True) if d["type"] == et]
            nx.draw_networkx_edges(sub, pos, edgelist=edges, ax=ax, edge_color=color, alpha=0.6, arrows=True,
                                   width=[0.5 + 2 * sub.edges[e]["confidence"] for e in edges], label=et)
        nx.draw_networkx_labels(sub, pos, {n: sub.nodes[n]["text"][:24] for n in sub}, ax=ax, font_size=7)
        from matplotlib.lines import Line2D

        handles = [Line2D([0], [0], color=c, lw=2, label=t) for t, c in EDGE_COLORS.items()]
        ax.legend(handles=handles, loc="lower left", title="edge type (node: orange entity, purple concept)")
    stats = graph.stats()
    ax.set_title(f"LTM graph: top {len(sub)} of {stats['nodes']} nodes by evidence ({stats['edges']} edges, "
                 f"{stats['cycles']} cycles)")
    ax.axis("off")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path
