"""KARMA's planner: the fastest plan the performance model can find under a capacity."""
