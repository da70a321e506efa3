"""Which aten operators the dispatcher shows are kernels: size queries and aliases or bare allocations
move no bytes and launch nothing, so neither the profile's trace (karma/profile/trace.py) nor the
automatic chains' cost (models/auto_chain.py) counts them."""

import torch

#: Size queries that dispatch modes see but that are not kernels.
SIZE_QUERIES = {
    torch.ops.aten.size.default, torch.ops.aten.stride.default, torch.ops.aten.numel.default,
    torch.ops.aten.dim.default, torch.ops.aten.is_contiguous.default, torch.ops.aten.storage_offset.default,
    torch.ops.aten.sym_size.default, torch.ops.aten.sym_stride.default, torch.ops.aten.sym_numel.default,
    torch.ops.prim.layout.default,
}

#: Operators that move no bytes and launch no kernel: aliases the dispatcher does not mark as views
#: (`_unsafe_view` is `reshape`'s output on a contiguous tensor) and allocations without a fill.
NO_KERNEL = {
    "aten._unsafe_view", "aten.alias", "aten.detach", "aten.lift_fresh", "aten._reshape_alias",
    "aten.empty", "aten.empty_like", "aten.empty_strided", "aten.new_empty", "aten.new_empty_strided",
}
