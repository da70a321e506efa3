"""Which tensor storages are alive while operators run: the memory accounting shared by the profiler's
recorder (karma/profile/trace.py OpRecorder) and the emulated device's tracker (karma/runtime/ledger.py), so
that what a profile says a unit holds and what the runtime measures are counted the same way."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

import torch


def storage_key(t: torch.Tensor) -> int:
    """Identity of the memory behind a tensor, valid on meta too (no data_ptr there)."""
    return t.untyped_storage()._cdata


def storage_bytes(t: torch.Tensor) -> int:
    return t.untyped_storage().nbytes()


class StorageLifetimes:
    """Which storages created by operators are still alive, and how many bytes.

    A storage counts from the op that creates it until its last tensor dies
    (weakref finalizers; autograd keeps the Python objects of the tensors it
    holds alive, so this follows PyTorch's own lifetimes, on meta as on CPU).
    `allocated(key, nbytes)` is called when a storage appears (it may raise to
    refuse it) and `freed(key, nbytes)` when its last tensor dies. Thread safe:
    finalizers run on whichever thread drops the last reference.
    """

    def __init__(self, allocated: Callable[[int, int], None], freed: Callable[[int, int], None]):
        self.allocated, self.freed = allocated, freed
        self._refs: dict[int, list[int]] = {}  # key -> [bytes, live tensors, 1 while deferred]
        self._deferred: list[int] = []
        self._lock = threading.Lock()

    def track(self, t: torch.Tensor, new_storage: bool, key=None, defer: bool = False,
              storage: bool = False) -> None:
        """Follow `t`'s storage (under `key`, by default the storage's own identity). With `defer`, a
        new storage counts only from the next `settle()` (see `accumulates_gradients`). With `storage`,
        until the storage itself dies (PyTorch keeps one Python object per live storage), not `t`: a
        tensor handed to code that goes on with a detached alias of it (torch.utils.checkpoint's
        recompute detaches its inputs) dies while its memory is still in use."""
        key = storage_key(t) if key is None else key
        with self._lock:
            entry = self._refs.get(key)
            if entry is None:
                if not new_storage:
                    return
                nbytes = storage_bytes(t)
                if defer:
                    self._deferred.append(key)
                else:
                    self.allocated(key, nbytes)
                entry = self._refs[key] = [nbytes, 0, int(defer)]
            entry[1] += 1
        weakref.finalize(t.untyped_storage() if storage else t, self._drop, key)

    def settle(self) -> None:
        """Count the deferred storages that are still alive (what died meanwhile was never counted)."""
        if not self._deferred:
            return
        with self._lock:
            keys, self._deferred = self._deferred, []
            for key in keys:
                entry = self._refs.get(key)
                if entry is not None and entry[2]:
                    entry[2] = 0
                    self.allocated(key, entry[0])

    def _drop(self, key: int) -> None:
        with self._lock:
            entry = self._refs.get(key)
            if entry is None:
                return
            entry[1] -= 1
            if entry[1]:
                return
            del self._refs[key]
            if entry[2]:
                return
        self.freed(key, entry[0])


def accumulates_gradients(func, args, kwargs) -> bool:
    """Whether an operator is the autograd engine summing two gradients of one tensor (a tensor read
    by two operators: the fork of a residual block). Plain PyTorch sums them in place when it holds
    the last reference to one of them (torch/csrc/autograd/input_buffer.cpp); under any Python
    dispatch mode it cannot (the mode makes every tensor "subclass-like", ATen's
    TensorSubclassLikeUtils.h) and makes a new tensor, so a mode that follows memory would see one
    gradient more than the run it follows (enough to run a plan of the small ResNet-50 layer chain
    at batch 64 out of the capacity it was planned to fit; tests/models/test_layer_units.py).
    The modes here count the sum from the next operator on (StorageLifetimes `defer`): by then the
    summand autograd let go of has died, as if summed in place, and one still held elsewhere has
    not, as PyTorch's out-of-place sum."""
    return (func is torch.ops.aten.add.Tensor and not kwargs and len(args) == 2
            and all(isinstance(a, torch.Tensor) for a in args)
            and args[0].shape == args[1].shape and args[0].dtype == args[1].dtype
            and not torch.is_grad_enabled() and torch._C._current_autograd_node() is not None)
