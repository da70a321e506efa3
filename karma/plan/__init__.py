"""Plans: what to do with each block of a chain (keep, swap, recompute; weights resident or
streamed), and the plan space the planner searches."""
