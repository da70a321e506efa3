"""Megatron hybrid parallelism over MPI: tensor-parallel groups times data-parallel groups.

Run with ``mpiexec -n N python -m karma.parallel.hybrid_parallel MODEL --tp T``. World rank w is
rank ``w % T`` of tensor-parallel group ``w // T`` (consecutive ranks, as the GPUs of a
node) and rank ``w // T`` of data-parallel group ``w % T``. Each data-parallel replica
trains its slice of the global batch with its layers split over its tensor-parallel
group (karma/parallel/tensor_parallel.py), in core, optimizer on the device; after the backward
the gradients are averaged over the data-parallel group (one all-reduce per tensor,
after the backward, as Megatron-LM 2019) and every rank steps its own shard.

``--check`` compares, on every rank before training, the tensor-parallel forward output
and the gathered gradients of one step with the unsplit model on the same data, and
reports the largest differences. Rank 0 writes the full (gathered) weights, the step
times and the check atomically to ``--out``. Faults: any exception prints
``rank R: error: ...`` and aborts the job (MPI_Abort), so no rank hangs.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from karma.core.errors import KarmaError
from karma.core.files import write_atomically
from karma.parallel.data_parallel import shard
from karma.parallel.mpi_job import run_job
from karma.parallel.tensor_parallel import TPLayer, gather_layer, shard_chain
from karma.runtime.optim import new_optimizer
from models.registry import build

# mpi4py is imported inside the functions that run under MPI: importing it starts MPI.


def layout(comm, tp: int):
    """(tensor-parallel communicator, data-parallel communicator) of this rank."""
    if comm.size % tp:
        raise KarmaError(f"{comm.size} ranks do not form groups of tensor-parallel degree {tp}")
    return comm.Split(comm.rank // tp, comm.rank % tp), comm.Split(comm.rank % tp, comm.rank // tp)


def full_state(shard_chain, tp_comm) -> dict[str, torch.Tensor]:
    """The unsplit chain's state dict, the layers gathered from the tensor-parallel group."""
    state = {}
    for name, unit in shard_chain.units.named_children():
        if isinstance(unit, TPLayer):
            state.update({f"{name}.{k}": v.clone() for k, v in gather_layer(unit, tp_comm).items()})
        else:
            state.update({f"{name}.{k}": v.detach().clone() for k, v in unit.state_dict().items()})
    return state


def full_grads(shard_chain, tp_comm) -> dict[str, torch.Tensor]:
    grads = {}
    for name, unit in shard_chain.units.named_children():
        if isinstance(unit, TPLayer):
            grads.update({f"{name}.{k}": v.clone() for k, v in gather_layer(unit, tp_comm, grads=True).items()})
        else:
            grads.update({f"{name}.{k}": p.grad.clone() for k, p in unit.named_parameters()})
    return grads


def check_against_unsplit(full_chain, tp_comm, batch) -> dict[str, float]:
    """Largest |difference| of the forward output and of every gradient, TP vs unsplit."""
    shard = shard_chain(full_chain, tp_comm.rank, tp_comm.size, tp_comm)
    inputs, targets = batch
    out = shard.forward(inputs)
    shard.loss(out, targets).backward()
    ref = full_chain.forward(inputs)
    full_chain.loss(ref, targets).backward()
    reference = {f"{n}.{k}": p.grad for n, u in full_chain.units.named_children() for k, p in u.named_parameters()}
    got = full_grads(shard, tp_comm)
    for p in list(full_chain.units.parameters()) + list(shard.units.parameters()):
        p.grad = None
    return {"output": (out - ref).abs().max().item(),
            "gradients": max((got[k] - g).abs().max().item() for k, g in reference.items())}


def train_layout(comm, tp: int, chain, global_chain, steps: int, warmup: int = 0):
    """Train `chain` (per-replica batch) split over tensor-parallel groups of `tp` ranks, every
    data-parallel replica on its slice of `global_chain`'s batches; returns (the rank's shard chain,
    the tensor-parallel communicator, the step times after `warmup` steps)."""
    from mpi4py import MPI

    tp_comm, dp_comm = layout(comm, tp)
    model = shard_chain(chain, tp_comm.rank, tp, tp_comm)
    params = list(model.units.parameters())
    optimizer = new_optimizer(chain.optimizer, params)
    times = []
    for step in range(warmup + steps):
        batch = shard(global_chain.make_batch(seed=step), dp_comm.rank, dp_comm.size)
        torch.manual_seed(1000 + step)
        comm.Barrier()
        t0 = time.perf_counter()
        optimizer.zero_grad()
        model.step_loss(*batch).backward()
        if dp_comm.size > 1:
            for p in params:
                dp_comm.Allreduce(MPI.IN_PLACE, p.grad, op=MPI.SUM)
                p.grad.div_(dp_comm.size)
        optimizer.step()
        if step >= warmup:
            times.append(time.perf_counter() - t0)
    return model, tp_comm, times


def train(args, comm) -> dict:
    tp_comm, dp_comm = layout(comm, args.tp)
    if args.global_batch % dp_comm.size:
        raise KarmaError(f"global batch {args.global_batch} does not split over {dp_comm.size} data-parallel groups")
    global_chain = build(args.model, args.size, args.global_batch, seed=args.seed, overrides=args.overrides)

    def replica():
        chain = build(args.model, args.size, args.global_batch // dp_comm.size, seed=args.seed,
                      overrides=args.overrides)
        chain.optimizer = args.optimizer or chain.optimizer
        return chain

    check = None
    if args.check:
        check = check_against_unsplit(replica(), tp_comm, shard(global_chain.make_batch(seed=0), dp_comm.rank,
                                                                 dp_comm.size))
    model, tp_comm, times = train_layout(comm, args.tp, replica(), global_chain, args.steps)
    return {"state": full_state(model, tp_comm), "times": times, "check": check, "tp": args.tp,
            "dp": dp_comm.size}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m karma.parallel.hybrid_parallel", description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--tp", type=int, default=2, help="tensor-parallel degree (ranks per group)")
    p.add_argument("--size", default="tiny")
    p.add_argument("--global-batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-dropout", dest="overrides", action="store_const", const={"dropout": 0.0}, default=None,
                   help="build the model without dropout (split heads draw other masks than one process)")
    p.add_argument("--optimizer", choices=["sgd", "adam"], help="override the model's optimizer")
    p.add_argument("--check", action="store_true", help="compare one step with the unsplit model first")
    p.add_argument("--out", help="rank 0 writes the gathered weights, step times and the check here")
    return p


def _report(args, comm, result: dict) -> None:
    median = sorted(result["times"])[len(result["times"]) // 2]
    print(f"tp {args.tp} x dp {result['dp']}: median step {median:.4f} s "
          f"[measured on cpu, {comm.size} MPI ranks]" + (f"; check {result['check']}" if args.check else ""))
    if args.out:
        write_atomically(args.out, lambda tmp: torch.save(result, tmp))


def main(argv: list[str] | None = None) -> int:
    return run_job(parser, train, _report, argv)


if __name__ == "__main__":
    sys.exit(main())
