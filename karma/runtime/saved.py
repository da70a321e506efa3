"""What one block of a step saved for backward, and where it is (karma/runtime/execute.py).

Kept tensors count on the device ledger until autograd lets go of them; a swapped block's
are copied to the host after its forward and counted until that copy ends, and their
prefetched copies from the prefetch until autograd has used them.
"""

from __future__ import annotations

from concurrent.futures import Future

import torch

from karma.runtime.copies import to_device, to_host
from karma.runtime.ledger import Ledger
from karma.runtime.link import EmulatedLink
from karma.unit_trace import StorageLifetimes, storage_bytes, storage_key


class SavedTensors:
    """The tensors one block saved for backward, and where they are.

    Kept tensors count on the ledger until autograd lets go of them (as PyTorch frees saved
    tensors during the backward); swapped ones until their copy to the host ends, and their
    prefetched copies from the prefetch until autograd has used them. A storage is counted
    while it is alive and no longer: otherwise a new storage at the same address would go
    uncounted.
    """

    def __init__(self, k: int, swap: bool, ledger: Ledger, params: dict[object, torch.Tensor]):
        """`params` maps a weight's storage key, and ("id", id(weight)), to the weight."""
        self.k, self.swap, self.ledger, self.params = k, swap, ledger, params
        self.device: list[torch.Tensor] = []
        self.device_keys: list[int] = []
        self.place = torch.device("cpu")
        self.keys: dict[int, int] = {}
        self.host: list[torch.Tensor] | None = None
        self.back: Future | None = None
        # the ledger lets go of a storage when the last tensor holding it dies
        self._lifetimes = StorageLifetimes(lambda _key, _nbytes: None, self._dropped)

    def _dropped(self, key, _nbytes: int) -> None:
        prefetched = isinstance(key, tuple) and key[0] == "prefetched"
        self.ledger.release(key, (self, "back") if prefetched else self)

    def pack(self, t: torch.Tensor):
        key = storage_key(t)
        base = t._base if t._base is not None else t
        # a weight (or a view of one: mm saves weight.t()); by identity too, since a streamed weight's
        # storage on CUDA is allocated anew at each upload. The weight is saved, not the tensor: a
        # view would keep the evicted upload's storage alive on the GPU until the backward (found on
        # an H200: Megatron's kept blocks held every linear weight twice and ran out of the cap).
        weight = self.params.get(("id", id(base)))
        if weight is None:  # an alias of a weight's current storage (a key of an evicted one may be reused)
            weight = self.params.get(key)
            weight = weight if weight is not None and storage_key(weight) == key else None
        if weight is not None:
            return ("param", (weight, t.size(), t.stride(), t.storage_offset()))
        if key not in self.keys:
            self.keys[key] = storage_bytes(t)
            self.ledger.hold(key, self.keys[key], self, f"block {self.k}")
        if not self.swap:
            self._lifetimes.track(t, new_storage=True, key=key)
            return ("keep", t)
        self.device.append(t)
        self.device_keys.append(key)
        self.place = t.device
        return ("swap", len(self.device) - 1)

    def unpack(self, packed):
        kind, value = packed
        if kind == "param":
            weight, size, stride, offset = value  # its storage now: the upload for this backward
            if (size, stride, offset) == (weight.size(), weight.stride(), weight.storage_offset()):
                return weight
            return weight.detach().as_strided(size, stride, offset)
        if kind != "swap":
            return value
        copies = self.back.result()
        t, copies[value] = copies[value], None  # autograd holds it from here, and frees it after use
        self._lifetimes.track(t, new_storage=True, key=("prefetched", self.k, self.device_keys[value]))
        return t

    @property
    def nbytes(self) -> int:
        return sum(self.keys.values())

    def swap_out(self, link: EmulatedLink) -> Future:
        tensors = self.device

        def copy():
            return [to_host(t) for t in tensors]

        def done(host):
            # The device copies die when the transfer ends, as on a GPU (and not before: the
            # ledger holds their storages until then, so they must not be reused meanwhile).
            self.host = host
            tensors.clear()
            self.device = []
            for key in list(self.keys):
                self.ledger.release(key, self)

        return link.submit("d2h", self.nbytes, copy, "swap out", self.k, on_end=done)

    def prefetch(self, link: EmulatedLink, after: Future) -> None:
        owner = (self, "back")

        def start():
            after.result()
            for key, nbytes in self.keys.items():  # new storages: keys of their own
                self.ledger.hold(("prefetched", self.k, key), nbytes, owner, f"prefetch of block {self.k}")

        def copy():
            return [to_device(h, self.place) for h in self.host]

        self.back = link.submit("h2d", self.nbytes, copy, "prefetch", self.k, on_start=start)

    def release(self) -> None:
        self.ledger.release_all(self)
        self.ledger.release_all((self, "back"))
