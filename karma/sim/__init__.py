"""The performance model: an event simulation of one training iteration of a plan, its resources,
and the lower bound on every plan's time."""
