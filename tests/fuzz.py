"""How many examples a property test draws: its own count, times KARMA_FUZZ (default 1).

`KARMA_FUZZ=20 pytest -m "" -n auto` is the longer fuzzing run for whoever changes the simulator, the
bound or the planner (README, Tests and CI); a failure prints the hypothesis seed that replays it
(`pytest --hypothesis-seed=N`)."""

import os


def examples(n: int) -> int:
    return n * max(1, int(os.environ.get("KARMA_FUZZ", "1")))
