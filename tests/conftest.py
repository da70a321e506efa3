"""Shared test settings: one torch thread (docs/machine.md: 2 cores, avoid oversubscription); the compiled
simulator, recompute program and annealing walk compiled once, before pytest-xdist starts its workers (each
would compile them otherwise)."""

import pytest
import torch

from karma.core.hardware import load
from karma.planner import recompute_dp, walk
from karma.profile.analytic import analytic_profile
from karma.sim import compiled
from models import build


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the controller, or a run without workers
        compiled.compile_now()
        recompute_dp.compile_now()
        walk.compile_now()


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_profile():
    """An analytic profile of a tiny ResNet on the paper's machine."""
    hw = load("v100-abci")
    return analytic_profile(build("resnet50", "tiny", device="meta"), hw), hw
