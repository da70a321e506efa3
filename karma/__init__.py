"""KARMA: out-of-core training planned by a performance model (Wahib et al., SC'20).

The package is split by the direction data flows: hardware and profile (costs),
then plan, simulate and runtime in later modules. Importing it does no work.
"""

__version__ = "0.1.0"
