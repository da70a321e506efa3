"""The runtime: execute a Plan on a real PyTorch chain model, one training step at a time.

This package holds the CPU path with an emulated device (docs/design.md, Runtime):
device-resident bytes are accounted against a capacity (karma/runtime/ledger.py)
and copies go through an emulated link of a given bandwidth on worker threads
(karma/runtime/link.py), so compute and transfers really overlap.
"""
