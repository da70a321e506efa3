"""Shared test settings: one torch thread (FACTS.md: 2 cores, avoid oversubscription)."""

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    torch.set_num_threads(1)
