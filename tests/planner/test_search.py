"""The local search's neighbourhood (karma/planner/search.py): the compiled annealing walks
(karma/planner/walk.py) draw a random move by index instead of listing every move; the moves they can draw must
be exactly the listed ones, so that a walk samples the neighbourhood the descents scan."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from karma.plan.space import KINDS, Space, blocks_from_runs
from karma.planner.search import Search
from karma.planner.walk import LETTERS, moves
from karma.profile.profile import Profile
from karma.sim.compiled import KIND_CODES
from tests.chains import V100, make_unit
from tests.fuzz import examples

SETTINGS = settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck),
                    database=None)


@st.composite
def states(draw):
    runs = draw(st.lists(st.tuples(st.sampled_from(KINDS), st.integers(1, 7)), min_size=1, max_size=8))
    blocks = blocks_from_runs(runs)
    space = Space(kinds=tuple(draw(st.sets(st.sampled_from(KINDS), min_size=1)) | {k for *_, k in blocks}),
                  depths=tuple(sorted(draw(st.sets(st.integers(0, 4), min_size=1)))))
    state = (blocks, draw(st.sampled_from(space.depths)), draw(st.sampled_from(space.layouts)))
    return state, space, draw(st.sampled_from([None, 1, 2])), draw(st.booleans())


@SETTINGS
@given(states())
def test_a_move_drawn_by_index_is_the_listed_move_of_that_index(case):
    state, space, near, combos = case
    n = state[0][-1][1]
    units = tuple(make_unit(f"u{i}", forward_time=1e-3, backward_time=2e-3, saved_bytes=1e8) for i in range(n))
    profile = Profile(model="chain", size="tiny", batch=1, source="analytic", device=V100.name, optimizer="sgd",
                      units=units)
    search = Search(profile, V100, 16e9, space, near=near, combos=combos)
    listed = list(search.block_moves(state[0]))
    blocks = state[0]
    bounds = np.array([a for a, _, _ in blocks] + [n], dtype=np.int64)
    codes = np.array([KIND_CODES[k] for *_, k in blocks], dtype=np.int64)
    rows_b, rows_c, counts = moves(bounds, codes, np.array([KIND_CODES[k] for k in space.kinds], dtype=np.int64),
                                   -1 if near is None else near)
    drawn = [tuple((int(b[i]), int(b[i + 1]), LETTERS[int(c[i])]) for i in range(m))
             for b, c, m in zip(rows_b, rows_c, counts, strict=True)]
    assert drawn == listed


def test_a_plan_over_the_capacity_is_not_repaired_it_descends_towards_a_fit():
    """`repair` tries second moves from faster neighbours that do not fit; from a plan that does not fit
    itself every neighbour over the capacity counts as faster, and each try scans a whole neighbourhood
    (a layer chain's reach search spent most of its time there). There is nothing to repair: None."""
    units = tuple(make_unit(f"u{i}", forward_time=1e-3, backward_time=2e-3, saved_bytes=1e9) for i in range(8))
    profile = Profile(model="chain", size="tiny", batch=1, source="analytic", device=V100.name, optimizer="sgd",
                      units=units)
    space = Space()
    search = Search(profile, V100, 1e6, space)  # nothing fits in 1 MB
    state = (blocks_from_runs([("K", 8)]), space.first_depth, space.layouts[0])
    moves = list(search.neighbours(state))
    for m in [state, *moves]:
        search.cost(m)
    before = len(search.cache)
    assert search.repair(state, moves) is None
    assert len(search.cache) == before
