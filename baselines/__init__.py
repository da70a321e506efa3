"""Memory strategies other than KARMA's, one file each, behind the same
interface as KARMA's planner (docs/baselines.md)."""
