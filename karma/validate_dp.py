"""Check the data parallel performance model against real MPI runs on this machine.

``mpiexec -n N python -m karma.validate_dp MODEL --out table.csv``: every rank
measures the model's profile (under the same contention as training), the ranks
time an MPI all-reduce to calibrate the network of a one-node "cluster" of this
machine (alpha from a tiny message, beta from a large one), then train with the
pipelined and the naive order. Rank 0 simulates both orders on the measured
profile with that network and writes measured and predicted step times and the
naive/pipelined ratios side by side (measured on cpu-emulated N MPI ranks;
predicted by karma/simulate.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace

import torch

from karma.mpi_job import write_table


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


def main(argv: list[str] | None = None) -> int:
    import pandas as pd
    from mpi4py import MPI

    from karma.distributed import train_ranks
    from karma.plan import from_policies
    from karma.profile_measured import measured_profile
    from karma.runtime.emulation import emulated_hardware
    from karma.runtime.rates import cpu_rates
    from karma.simulate import simulate
    from models.registry import build

    p = argparse.ArgumentParser(prog="python -m karma.validate_dp")
    p.add_argument("model")
    p.add_argument("--size", default="small")
    p.add_argument("--batch", type=int, default=4, help="per-rank batch")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--link-mbs", type=float, default=1000.0)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    n = comm.size
    profile = measured_profile(build(args.model, args.size, args.batch, seed=0), reps=3)
    alpha, beta = calibrate_allreduce(comm)
    link = args.link_mbs * 1e6
    hw = replace(emulated_hardware(profile, cpu_rates(link, profile.optimizer), float("inf")),
                 name=f"this machine, {n} MPI ranks", gpus_per_node=n, intra_node_bw=beta, intra_node_latency=alpha)
    global_chain = build(args.model, args.size, args.batch * n, seed=0)
    plan = from_policies(args.model, args.batch, ["keep"] * len(profile.units), weights="streamed")
    measured = {}
    for order in ("pipelined", "naive"):
        chain = build(args.model, args.size, args.batch, seed=0)
        times = train_ranks(comm, chain, plan, global_chain, args.steps, link, order, warmup=1)
        measured[order] = statistics.median(comm.allgather(statistics.median(times)))
    if comm.rank == 0:
        rows = []
        for order in ("pipelined", "naive"):
            sim = simulate(profile, plan, hw, gpus=n, order=order)
            rows.append({"model": args.model, "ranks": n, "order": order, "measured_s": measured[order],
                         "predicted_s": sim.time, "measured_over_predicted": measured[order] / sim.time,
                         "allreduce_alpha_us": alpha * 1e6, "allreduce_beta_MBs": beta / 1e6,
                         "source": f"measured on cpu-emulated ({n} MPI ranks, link {link / 1e6:.0f} MB/s); "
                                   f"predicted by the simulator on the measured profile"})
        df = pd.DataFrame(rows)
        df["naive_over_pipelined_measured"] = measured["naive"] / measured["pipelined"]
        df["naive_over_pipelined_predicted"] = df.predicted_s.iloc[1] / df.predicted_s.iloc[0]
    return write_table(comm, df if comm.rank == 0 else None, args.out)


if __name__ == "__main__":
    sys.exit(main())
