"""What one block of a step saved for backward, and where it is (karma/runtime/execute.py).

Kept tensors count on the device ledger until autograd lets go of them; a swapped block's
are copied to the host after its forward and counted until that copy ends, and their
prefetched copies from the prefetch until autograd has used them. A tensor two adjacent
swapped blocks both save (one block's output, the next one's input) is copied once each way,
as vDNN offloads each layer's input once (Rhu et al. 2016, Sec. III-B): out with the earlier
block's copy, back with the later block's prefetch (its backward runs first), and handed on
to the earlier block's backward (karma/sim/simulate.py models the same).
"""

from __future__ import annotations

import weakref
from concurrent.futures import Future

import torch

from karma.core.storages import StorageLifetimes, storage_bytes, storage_key
from karma.runtime.copies import to_device, to_host
from karma.runtime.ledger import Ledger
from karma.runtime.link import EmulatedLink


class SavedTensors:
    """The tensors one block saved for backward, and where they are.

    Kept tensors count on the ledger until autograd lets go of them (as PyTorch frees saved
    tensors during the backward); swapped ones until their copy to the host ends, and their
    prefetched copies from the prefetch until autograd has used them. A storage is counted
    while it is alive and no longer: otherwise a new storage at the same address would go
    uncounted.
    """

    def __init__(self, k: int, swap: bool, ledger: Ledger, params: dict[object, torch.Tensor],
                 prev: SavedTensors | None = None, checkpoint: bool = False):
        """`params` maps a weight's storage key, and ("id", id(weight)), to the weight; `prev` is the
        previous block's store when both blocks are swapped (a tensor both save is copied once);
        `checkpoint`: what goes to the host is a recompute block's checkpoint, and its copies are named
        as the simulator names them."""
        self.k, self.swap, self.ledger, self.params, self.prev = k, swap, ledger, params, prev
        self.ops = ("offload checkpoint", "prefetch checkpoint") if checkpoint else ("swap out", "prefetch")
        self.borrowed: list[int] = []  # indices into prev.device of tensors this block saved too
        self.lent: set[int] = set()  # indices of self.device the next block brings back for this one
        self.given: dict[int, torch.Tensor] = {}  # lent index -> the device copy the next block brought back
        self.device: list[torch.Tensor] = []
        self.device_keys: list[int] = []
        self.views: list[tuple] = []  # (dtype, size, stride, offset) of each swapped tensor
        self.refs: list[weakref.ref] = []  # each swapped tensor, while it lives (its storage cannot be reused)
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
        # view would keep the evicted upload's storage alive on the GPU until the backward (Megatron's
        # kept blocks would hold every linear weight twice and run out of the cap).
        weight = self.params.get(("id", id(base)))
        if weight is None:  # an alias of a weight's current storage (a key of an evicted one may be reused)
            weight = self.params.get(key)
            weight = weight if weight is not None and storage_key(weight) == key else None
        if weight is not None:
            return ("param", (weight, t.size(), t.stride(), t.storage_offset()))
        if self.swap and self.prev is not None:
            j = self.prev.same_as(t, key)
            if j is not None:  # the previous block copies it out; this block brings it back
                self.prev.lent.add(j)
                self.place = t.device
                if j not in self.borrowed:
                    self.borrowed.append(j)
                return ("borrowed", j)
        if key not in self.keys:
            self.keys[key] = storage_bytes(t)
            self.ledger.hold(key, self.keys[key], self, f"block {self.k}")
        if not self.swap:
            self._lifetimes.track(t, new_storage=True, key=key)
            return ("keep", t)
        self.device.append(t)
        self.device_keys.append(key)
        self.views.append((t.dtype, t.size(), t.stride(), t.storage_offset()))
        self.refs.append(weakref.ref(t))
        self.place = t.device
        return ("swap", len(self.device) - 1)

    def same_as(self, t: torch.Tensor, key) -> int | None:
        """Index of the very tensor `t` views (same storage, shape, strides, offset) among this block's
        swapped tensors, when that storage is saved once here. Only a tensor still alive counts: a storage
        key of a freed tensor may be reused by a new one of the same shape (every GPT layer's)."""
        if self.device_keys.count(key) != 1:
            return None
        j = self.device_keys.index(key)
        o = self.refs[j]()
        if o is None or storage_key(o) != key:
            return None
        return j if self.views[j] == (t.dtype, t.size(), t.stride(), t.storage_offset()) else None

    def unpack(self, packed):
        kind, value = packed
        if kind == "borrowed":  # brought back by this block's prefetch, handed on to the previous block
            copies = self.back.result()
            t = copies[len(self.device_keys) + self.borrowed.index(value)]
            self.prev.given[value] = t
            return t
        if kind == "param":
            weight, size, stride, offset = value  # its storage now: the upload for this backward
            if (size, stride, offset) == (weight.size(), weight.stride(), weight.storage_offset()):
                return weight
            return weight.detach().as_strided(size, stride, offset)
        if kind != "swap":
            return value
        if value in self.lent:
            t = self.given.pop(value)
        else:
            copies = self.back.result()
            t, copies[value] = copies[value], None  # autograd holds it from here, and frees it after use
        # while its storage lives: a recompute block's checkpoint is read through detached aliases
        self._lifetimes.track(t, new_storage=True, key=("prefetched", self.k, self.device_keys[value]), storage=True)
        return t

    @property
    def nbytes(self) -> int:
        return sum(self.keys.values())

    def _lent_keys(self) -> set:
        return {self.device_keys[j] for j in self.lent}

    def _back_bytes(self) -> int:
        """Bytes this block's prefetch brings: its own less what the next block brings, plus what it borrowed."""
        lent = self._lent_keys()
        own = sum(n for key, n in self.keys.items() if key not in lent)
        return own + sum(self.prev.keys[self.prev.device_keys[j]] for j in self.borrowed)

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

        self.ledger.expect_release()  # an allocation past the capacity waits for it (karma/runtime/ledger.py)
        future = link.submit("d2h", self.nbytes, copy, self.ops[0], self.k, on_end=done)
        future.add_done_callback(lambda _future: self.ledger.released())
        return future

    def prefetch(self, link: EmulatedLink, after: Future) -> None:
        """Copy the block back once its swap-out (`after`) is over. Its device storages are taken now,
        when the copy is issued (as a CUDA program allocates the destination before queueing the copy),
        not when the link gets to it, so that no link faster than planned needs more memory for it; a copy
        issued before its swap-out ended takes them once it has (its device copy is gone then), never
        before the simulator does (karma/sim/simulate.py)."""
        owner = (self, "back")
        lent = self._lent_keys()

        def take():
            for key, nbytes in self.keys.items():  # new storages: keys of their own
                if key not in lent:
                    self.ledger.hold(("prefetched", self.k, key), nbytes, owner, f"prefetch of block {self.k}")
            for j in self.borrowed:  # held for the previous block, whose backward uses it last
                key = self.prev.device_keys[j]
                self.ledger.hold(("prefetched", self.prev.k, key), self.prev.keys[key], (self.prev, "back"),
                                 f"prefetch of block {self.k}")

        taken = after.done()
        if taken:
            take()

        def start():
            after.result()
            if not taken:
                take()

        def copy():
            mine = [None if j in self.lent else to_device(h, self.place) for j, h in enumerate(self.host)]
            return mine + [to_device(self.prev.host[j], self.place) for j in self.borrowed]

        self.back = link.submit("h2d", self._back_bytes(), copy, self.ops[1], self.k, on_start=start)

    def release(self) -> None:
        self.ledger.release_all(self)
        self.ledger.release_all((self, "back"))
