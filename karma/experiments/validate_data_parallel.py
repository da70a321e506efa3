"""Check the data parallel performance model against real MPI runs on this machine.

``mpiexec -n N python -m karma.experiments.validate_data_parallel MODEL --out table.csv``: the ranks time an MPI
all-reduce (alpha from a tiny message, beta from a large one), then, `--repeats` times, every
rank measures the model's profile (all at once, under the same contention as training) and the
ranks train with the pipelined and the naive order (interleaved, alternating which goes first).
Every rank simulates both orders on its repeat's profile (the slowest rank is the prediction);
rank 0 writes measured and predicted step times and the naive/pipelined ratios, with median, min
and max over the repeats (measured on cpu-emulated N MPI ranks; predicted by karma/sim/simulate.py).

Why the network and the host optimizer are emulated: with one rank per core, the ranks' compute
takes every core of this machine. A real shared-memory all-reduce, or a real host optimizer
step, overlapped with the backward (the pipelined order) only takes the core from the rank's
compute, where on a GPU cluster they run on the NIC and on the host's own cores; and a blocking
MPI wait busy-polls a core (docs/machine.md, "MPI"). Measured that way on 2 cores, the pipelined order
comes out *slower* than the naive one where the model predicts it faster: the run measures
contention, not pipelining. So, as the host link is (karma/runtime/link.py), the network and
the host optimizer are emulated at the reference machine's ratios to its link (one GPU's share
of a node's network and host: `emulated_rates`): the work is done for real, then it waits out
its time (karma.parallel.data_parallel.Paced), and waits poll instead of spinning. `--real-network` runs
them for real.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace

import pandas as pd
import torch

from karma.core.hardware import load
from karma.parallel.data_parallel import train_ranks
from karma.parallel.mpi_job import write_table
from karma.plan.plan import from_policies
from karma.profile.measured import measured_profile
from karma.runtime.emulation import emulated_hardware
from karma.runtime.rates import cpu_rates
from karma.sim.simulate import simulate
from models.registry import build

# mpi4py is imported inside the functions that run under MPI: importing it starts MPI.


def time_allreduce(comm, nbytes: int, reps: int = 5) -> float:
    from mpi4py import MPI

    buf = torch.zeros(max(1, nbytes // 4))
    times = []
    for _ in range(reps + 1):
        comm.Barrier()
        t0 = time.perf_counter()
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def calibrate_allreduce(comm, big: int = 32 << 20) -> tuple[float, float]:
    """(alpha s, beta bytes/s) of the ring model 2(n-1) alpha + 2(n-1)/n bytes/beta on these ranks:
    alpha from a 4-byte all-reduce, beta from a `big` one."""
    n = comm.size
    alpha = time_allreduce(comm, 4) / (2 * max(n - 1, 1))
    beta = 2 * (n - 1) / n * big / max(time_allreduce(comm, big) - 2 * (n - 1) * alpha, 1e-9)
    return alpha, beta


def emulated_rates(link: float, reference: str = "v100-abci") -> tuple[float, float]:
    """(network, host optimizer) bytes/s per rank that keep the `reference` machine's ratios to its
    host link: one GPU's share of the node's inter-node network and of its host optimizer rate,
    scaled as the emulated link is (docs/design.md, "Measured versus simulated")."""
    ref = load(reference)
    scale = link / ref.h2d_bw
    return ref.inter_node_bw / ref.gpus_per_node * scale, ref.host_update_bw / ref.gpus_per_node * scale


def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main(argv: list[str] | None = None) -> int:
    from mpi4py import MPI

    p = argparse.ArgumentParser(prog="python -m karma.experiments.validate_data_parallel")
    p.add_argument("model")
    p.add_argument("--size", default="small")
    p.add_argument("--batch", type=int, default=4, help="per-rank batch")
    p.add_argument("--steps", type=int, default=2, help="timed steps per order and repeat (after one warm-up)")
    p.add_argument("--repeats", type=int, default=3, help="runs of each order, interleaved")
    p.add_argument("--link-mbs", type=float, default=300.0)
    p.add_argument("--reference", default="v100-abci",
                   help="the network and host optimizer are emulated at this preset's ratios to its link")
    p.add_argument("--real-network", action="store_true",
                   help="the MPI all-reduce and host optimizer of this machine, not emulated")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    n = comm.size
    alpha, beta = calibrate_allreduce(comm)
    link = args.link_mbs * 1e6
    network_bw, host_bw = (None, None) if args.real_network else emulated_rates(link, args.reference)
    global_chain = build(args.model, args.size, args.batch * n, seed=0)
    measured: dict[str, list[float]] = {"pipelined": [], "naive": []}
    predicted: dict[str, list[float]] = {"pipelined": [], "naive": []}
    for repeat in range(args.repeats):  # interleaved, so that drift hits both orders alike
        # Each repeat measures the profile anew (all ranks at once, under the contention of training)
        # and predicts from it: the prediction sees the same machine as the runs next to it.
        profile = measured_profile(build(args.model, args.size, args.batch, seed=0), reps=2)
        plan = from_policies(args.model, args.batch, ["keep"] * len(profile.units), weights="streamed")
        if repeat == 0:
            rates = cpu_rates(link, profile.optimizer, global_chain)
        hw = replace(emulated_hardware(profile, rates, float("inf")),
                     name=f"this machine, {n} MPI ranks", gpus_per_node=n, intra_node_bw=network_bw or beta,
                     intra_node_latency=alpha, host_update_bw=host_bw or rates.host_update)
        for order in ("pipelined", "naive")[::1 if repeat % 2 == 0 else -1]:
            chain = build(args.model, args.size, args.batch, seed=0)
            times = train_ranks(comm, chain, plan, global_chain, args.steps, link, order, warmup=1,
                                network_bw=network_bw, host_bw=host_bw, latency=alpha)
            measured[order].append(statistics.median(comm.allgather(statistics.median(times))))
            # Every rank predicts from its own profile; the slowest sets the pace of the collectives
            # (a core shared with another process slows one rank, not all).
            predicted[order].append(max(comm.allgather(simulate(profile, plan, hw, gpus=n, order=order).time)))
    df = None
    if comm.rank == 0:
        emulated = ("the MPI all-reduce and host optimizer of this machine" if args.real_network else
                    f"network {network_bw / 1e6:.0f} MB/s per rank and host optimizer {host_bw / 1e6:.0f} MB/s "
                    f"emulated at {args.reference}'s ratios to its link")
        ratios = [nv / pv for nv, pv in zip(measured["naive"], measured["pipelined"], strict=True)]
        predicted_ratios = [nv / pv for nv, pv in zip(predicted["naive"], predicted["pipelined"], strict=True)]
        errors = [m / p for m, p in zip(ratios, predicted_ratios, strict=True)]
        rows = []
        for order in ("pipelined", "naive"):
            m = spread(measured[order])
            rows.append({"model": args.model, "ranks": n, "order": order, "repeats": args.repeats,
                         "measured_s": m["median"], "measured_s_min": m["min"], "measured_s_max": m["max"],
                         "predicted_s": statistics.median(predicted[order]),
                         "measured_over_predicted": m["median"] / statistics.median(predicted[order]),
                         "allreduce_alpha_us": alpha * 1e6, "allreduce_beta_MBs": beta / 1e6,
                         "network_MBs": hw.intra_node_bw / 1e6, "host_update_MBs": hw.host_update_bw / 1e6,
                         "source": f"measured on cpu-emulated ({n} MPI ranks, link {link / 1e6:.0f} MB/s, "
                                   f"{emulated}; {args.repeats} interleaved repeats of {args.steps} steps); "
                                   f"predicted by the simulator on the profile measured in each repeat"})
        df = pd.DataFrame(rows)
        for name, values in (("naive_over_pipelined_measured", ratios),
                             ("naive_over_pipelined_predicted", predicted_ratios),
                             ("ratio_measured_over_predicted", errors)):
            r = spread(values)
            df[name], df[f"{name}_min"], df[f"{name}_max"] = r["median"], r["min"], r["max"]
    return write_table(comm, df, args.out)


if __name__ == "__main__":
    sys.exit(main())
