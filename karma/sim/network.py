"""All-reduce cost on a cluster of Hardware nodes (the alpha-beta model).

For P ranks, a ring all-reduce of n bytes costs 2 (P-1) alpha + 2 (P-1)/P n / beta
(Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations
in MPICH", IJHPCA 2005). On g GPUs per node we take the cheaper of
* a flat ring over all P = N g ranks, where the g ranks of a node share the node's
  inter-node bandwidth (beta = inter_node_bw / g) once N > 1; and
* a hierarchical one: reduce-scatter inside the node (ring over g, intra-node link),
  a ring all-reduce of each n/g shard across the N nodes (the g shards in parallel,
  sharing the node's bandwidth), then an all-gather inside the node.
KARMA all-reduces from host buffers; the intra-node figures of the Hardware stand for
the host path between the node's ranks.
"""

from __future__ import annotations

import math

from karma.core.errors import KarmaError
from karma.core.hardware import Hardware


def nodes_for(gpus: int, hw: Hardware) -> int:
    """Nodes that `gpus` ranks fill; a count the nodes cannot form is refused."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise KarmaError(f"GPU count must be a positive integer, got {gpus!r}")
    if gpus > hw.gpus_per_node and gpus % hw.gpus_per_node:
        raise KarmaError(f"{gpus} GPUs do not fill whole {hw.name} nodes of {hw.gpus_per_node} GPUs; "
                         f"use a multiple of {hw.gpus_per_node}")
    return max(1, math.ceil(gpus / hw.gpus_per_node))


def ring(nbytes: float, ranks: int, bandwidth: float, latency: float) -> float:
    if ranks <= 1:
        return 0.0
    return 2 * (ranks - 1) * latency + 2 * (ranks - 1) / ranks * nbytes / bandwidth


def allreduce_time(nbytes: float, hw: Hardware, gpus: int) -> float:
    """Seconds to all-reduce `nbytes` over `gpus` ranks of `hw` nodes."""
    nodes = nodes_for(gpus, hw)
    per_node = min(gpus, hw.gpus_per_node)
    if nodes == 1:
        return ring(nbytes, per_node, hw.intra_node_bw, hw.intra_node_latency)
    flat = ring(nbytes, gpus, hw.inter_node_bw / per_node, hw.inter_node_latency)
    inside = ring(nbytes, per_node, hw.intra_node_bw, hw.intra_node_latency)  # reduce-scatter + all-gather
    across = ring(nbytes / per_node, nodes, hw.inter_node_bw / per_node, hw.inter_node_latency)
    return min(flat, inside + across)
