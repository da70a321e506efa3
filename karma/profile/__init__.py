"""Profiles: the per-unit costs of a chain model, counted on the meta device (analytic) or timed
on a real one (measured)."""
