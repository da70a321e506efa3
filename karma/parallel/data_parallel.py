"""Out-of-core data parallel over MPI (KARMA Sec. V): pipelined host all-reduce, host updates.

Run with ``mpiexec -n N python -m karma.parallel.data_parallel MODEL ...``. Every rank trains its
shard of the global batch with the out-of-core runtime, the optimizer on the host (the
plan's weights streamed, or resident and sent back up after each update): as soon as
a block's gradients reach the host, that rank's host thread all-reduces them (MPI, on
the host buffers) and runs the block's optimizer step, while the device goes on with
the backward of earlier blocks (``--order pipelined``); ``--order naive`` all-reduces and
updates every block only after the whole backward. Losses are means over each rank's
shard, so the averaged gradient is the gradient of the mean over the global batch, and
the weights equal one process training on the global batch (float tolerance: the sum
order differs).

Threads: one torch thread per rank (docs/machine.md: ranks x threads must not oversubscribe
the cores). Checked at start: every rank has the same model, batch and plan, or all
exit with one line. Faults: any exception on a rank prints ``rank R: error`` and aborts
the whole job (MPI_Abort), so no rank hangs in a collective and nothing half-written
is left (rank 0 writes its result atomically at the end); a rank that dies (killed,
crashed) makes mpiexec end the others and name its PID, which each rank's first line
(``rank R of N is pid P``) maps to its rank.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
import threading
import time

import torch

from karma.core.errors import KarmaError
from karma.core.files import write_atomically
from karma.parallel.mpi_job import run_job
from karma.plan.plan import Plan, from_policies
from karma.runtime.execute import train_step
from karma.runtime.ledger import Ledger
from karma.runtime.link import EmulatedLink
from karma.runtime.streamed import HostWeights
from karma.sim.network import ring
from karma.sim.simulate import optimizer_traffic_bytes
from models.registry import build

# mpi4py is imported inside the functions that run under MPI: importing it starts MPI.


def shard(batch, rank: int, size: int):
    """Rank `rank`'s equal slice of the global (inputs, targets)."""
    inputs, targets = batch
    n = inputs.shape[0]
    if n % size:
        raise ValueError(f"global batch {n} does not split over {size} ranks")
    per = n // size
    return inputs[rank * per:(rank + 1) * per], targets[rank * per:(rank + 1) * per]


class Paced:
    """An emulated resource of a given speed, in order like a queue: the work is done for real,
    then whoever waits for it waits out its deadline (as karma/runtime/link.py does for the link).
    Data parallel runs on a few cores use it for the network and the host optimizer: on 2 cores
    the ranks' compute takes both, so a real all-reduce or host update overlapped with the
    backward only takes cores from it, where on a GPU cluster they run on the NIC and the host's
    own cores (karma/experiments/validate_data_parallel.py)."""

    def __init__(self):
        self.free_at = 0.0
        self._lock = threading.Lock()

    def reserve(self, seconds: float, start: float | None = None) -> float:
        """The deadline of `seconds` of this resource starting at `start` (now) or when it is free."""
        with self._lock:
            begin = max(time.perf_counter() if start is None else start, self.free_at)
            self.free_at = begin + seconds
            return self.free_at

    @staticmethod
    def until(deadline: float) -> None:
        left = deadline - time.perf_counter()
        if left > 0:
            time.sleep(left)


def averaged(comm, network_bw: float | None = None, latency: float = 0.0, poll: float = 1e-3):
    """A reduce for HostWeights: start summing every gradient over the ranks (non-blocking);
    the returned wait completes the sums and divides by the number of ranks.

    The wait polls (MPI_Testall, then `poll` seconds asleep, up to 10 `poll` while the emulated
    time has that much left: fewer wake-ups on a busy machine) instead of MPI_Waitall, which
    busy-polls a core (docs/machine.md): on 2 cores that core is the other rank's compute. MPICH
    progresses the requests inside each Testall. With `network_bw` the all-reduce is emulated on
    a network of that bandwidth per rank: done for real, it ends no earlier than the ring model's
    time (karma/sim/network.py) after it could start (the network is an in-order queue)."""
    from mpi4py import MPI

    network = Paced() if network_bw else None

    def reduce(grads):
        grads = [g for g in grads if g is not None]
        start = time.perf_counter()
        requests = [comm.Iallreduce(MPI.IN_PLACE, g, op=MPI.SUM) for g in grads]
        nbytes = sum(g.numel() * g.element_size() for g in grads)
        deadline = network.reserve(ring(nbytes, comm.size, network_bw, latency), start) if network else 0.0

        def wait():
            # progress the requests every `poll` seconds until they are done, sleep out the rest
            while not MPI.Request.Testall(requests):
                time.sleep(max(poll, min(deadline - time.perf_counter(), 10 * poll)))
            Paced.until(deadline)
            for g in grads:
                g.div_(comm.size)

        return wait

    return reduce


def paced_host_weights(chain, plan, host_bw: float | None, **kwargs):
    """HostWeights whose optimizer steps run for real and end no earlier than the step's optimizer
    traffic (karma.sim.simulate.optimizer_traffic_bytes) at `host_bw` bytes/s after they start (an
    emulated host CPU; None: as fast as this CPU does it)."""
    class PacedHostWeights(HostWeights):
        pace = Paced()

        def _step(self, k, wait):
            if wait is not None:
                wait()
            nbytes = sum(self._bytes(p) for p in self.owned[k])
            deadline = self.pace.reserve(optimizer_traffic_bytes(nbytes, chain.optimizer) / host_bw)
            super()._step(k, None)
            Paced.until(deadline)

    return (PacedHostWeights if host_bw else HostWeights)(chain, plan, **kwargs)


def train_ranks(comm, chain, plan, global_chain, steps: int, link_bw: float, order: str,
                warmup: int = 0, network_bw: float | None = None, host_bw: float | None = None,
                latency: float = 0.0) -> list[float]:
    """Train `chain` on this rank's shard of `global_chain`'s batches, host updates with gradients
    averaged over the ranks; returns the step times after `warmup` steps. The ranks start each
    step together (a barrier) so that the times compare. `network_bw` and `host_bw` emulate the
    network (per rank, `latency` per ring step) and the host optimizer (averaged,
    paced_host_weights); None: this machine's own."""
    times = []
    with EmulatedLink(link_bw, link_bw) as link:
        host = paced_host_weights(chain, plan, host_bw, reduce=averaged(comm, network_bw, latency),
                                  pipelined=order == "pipelined", link=link)
        try:
            for step in range(warmup + steps):
                batch = shard(global_chain.make_batch(seed=step), comm.rank, comm.size)
                torch.manual_seed(1000 + step)
                comm.Barrier()
                report = train_step(chain, plan, host, batch, Ledger(float("inf")), link, track=False)
                if step >= warmup:
                    times.append(report.time)
        finally:
            host.sync()
            host.close()
    return times


def train(args, comm) -> dict:
    global_chain = build(args.model, args.size, args.global_batch, seed=args.seed, overrides=args.overrides)
    per_rank = args.global_batch // comm.size
    if args.global_batch % comm.size:
        raise KarmaError(f"global batch {args.global_batch} does not split over {comm.size} ranks")
    chain = build(args.model, args.size, per_rank, seed=args.seed, overrides=args.overrides)
    if args.optimizer:
        chain.optimizer = args.optimizer
    plan = Plan.from_json(args.plan.format(rank=comm.rank)) if args.plan else from_policies(
        args.model, per_rank, ["keep"] * len(chain), weights="streamed")
    signature = hashlib.sha256(json.dumps({"model": args.model, "size": args.size, "batch": per_rank,
                                           "plan": plan.to_dict(), "overrides": args.overrides,
                                           "optimizer": chain.optimizer},
                                          sort_keys=True, default=str).encode()).hexdigest()
    signatures = comm.allgather(signature)
    if len(set(signatures)) > 1:
        bad = [r for r, s in enumerate(signatures) if s != signatures[0]]
        raise KarmaError(f"ranks disagree on the model or the plan (ranks {bad} differ from rank 0)")
    times = train_ranks(comm, chain, plan, global_chain, args.steps, args.link_mbs * 1e6, args.order,
                        network_bw=args.network_mbs * 1e6 if args.network_mbs else None,
                        host_bw=args.host_mbs * 1e6 if args.host_mbs else None)
    return {"state": {k: v.clone() for k, v in chain.units.state_dict().items()}, "times": times}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m karma.parallel.data_parallel", description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--size", default="tiny")
    p.add_argument("--global-batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--plan", help="plan JSON for the per-rank batch (default: keep all, streamed weights); "
                                  "'{rank}' in the path is replaced by the rank")
    p.add_argument("--order", choices=["pipelined", "naive"], default="pipelined")
    p.add_argument("--link-mbs", type=float, default=1000.0, help="emulated host link MB/s")
    p.add_argument("--network-mbs", type=float, help="emulated network MB/s per rank (default: MPI as it is)")
    p.add_argument("--host-mbs", type=float, help="emulated host optimizer MB/s (default: this CPU's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-dropout", dest="overrides", action="store_const", const={"dropout": 0.0}, default=None,
                   help="build the model without dropout (per-rank masks cannot match one process)")
    p.add_argument("--optimizer", choices=["sgd", "adam"], help="override the model's optimizer")
    p.add_argument("--fail-on-rank", type=int, help="(testing) raise on this rank before training")
    p.add_argument("--die-on-rank", type=int, help="(testing) this rank is killed (SIGKILL) before training")
    p.add_argument("--out", help="rank 0 writes the final weights and step times here (torch.save)")
    return p


def _train_or_fail(args, comm) -> dict:
    # If a rank dies (killed, crashed), mpiexec names its PID: this line maps it to the rank.
    print(f"karma.parallel.data_parallel: rank {comm.rank} of {comm.size} is pid {os.getpid()}", file=sys.stderr,
          flush=True)
    if args.fail_on_rank == comm.rank:
        raise RuntimeError("injected fault (--fail-on-rank)")
    if args.die_on_rank == comm.rank:
        os.kill(os.getpid(), signal.SIGKILL)
    return train(args, comm)


def _report(args, comm, result: dict) -> None:
    if args.out:
        out = write_atomically(args.out, lambda tmp: torch.save(result, tmp))
        median = sorted(result["times"])[len(result["times"]) // 2]
        print(f"{comm.size} ranks, {args.order}: median step {median:.4f} s "
              f"[measured on cpu-emulated, {comm.size} MPI ranks] -> {out}")


def main(argv: list[str] | None = None) -> int:
    return run_job(parser, _train_or_fail, _report, argv)


if __name__ == "__main__":
    sys.exit(main())
