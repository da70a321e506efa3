"""Check the Megatron cost model (karma/parallel/megatron_model.py) against real tensor-parallel runs here.

``mpiexec -n N python -m karma.experiments.validate_tensor_parallel MODEL --out table.csv``: the N ranks train the
same global batch as pure data parallel (tp=1 x dp=N) and as pure tensor parallel (tp=N
x dp=1), in core, with the real runner (karma/parallel/hybrid_parallel.py). For the prediction
every rank measures the profile of its own shard (all ranks at once, so under the same
contention as training), the ranks time an MPI all-reduce (alpha from a tiny message,
beta from a large one, as karma/experiments/validate_data_parallel.py), and rank 0 simulates both layouts with
karma/model_parallel.simulate_shard, the data-parallel all-reduce after the backward as
the runner does it. The table has measured and predicted step times and the
tensor-parallel / data-parallel ratio of each (measured on cpu, N MPI ranks; predicted
by the simulator on the measured profiles).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace

import pandas as pd
import torch

from karma.experiments.validate_data_parallel import calibrate_allreduce
from karma.parallel.hybrid_parallel import train_layout
from karma.parallel.megatron_model import Layout, simulate_shard
from karma.parallel.mpi_job import write_table
from karma.parallel.tensor_parallel import shard_chain
from karma.profile.measured import measured_profile
from karma.runtime.emulation import emulated_hardware
from karma.runtime.rates import cpu_rates
from karma.sim.network import ring
from models.registry import build, spec

# mpi4py is imported inside the functions that run under MPI: importing it starts MPI.


def main(argv: list[str] | None = None) -> int:
    from mpi4py import MPI

    p = argparse.ArgumentParser(prog="python -m karma.experiments.validate_tensor_parallel")
    p.add_argument("model")
    p.add_argument("--size", default="small")
    p.add_argument("--global-batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=2, help="timed steps per layout and repeat (after one warm-up)")
    p.add_argument("--repeats", type=int, default=3, help="runs of each layout, interleaved")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    n = comm.size
    hidden = spec(args.model).sizes[args.size]["hidden"]
    alpha, beta = calibrate_allreduce(comm)
    global_chain = build(args.model, args.size, args.global_batch, seed=0)
    rates = cpu_rates(float("inf"), global_chain.optimizer, global_chain)
    layouts = (1, n)
    profiles = {tp: measured_profile(shard_chain(build(args.model, args.size, args.global_batch * tp // n, seed=0),
                                                 comm.rank % tp, tp), reps=3) for tp in layouts}
    measured: dict[int, list[float]] = {tp: [] for tp in layouts}
    for repeat in range(args.repeats):  # interleaved, so that drift hits both layouts alike
        for tp in layouts[::1 if repeat % 2 == 0 else -1]:
            replica = args.global_batch // (n // tp)
            _, _, times = train_layout(comm, tp, build(args.model, args.size, replica, seed=0), global_chain,
                                       args.steps, warmup=1)
            measured[tp].append(statistics.median(comm.allgather(statistics.median(times))))
    df = None
    if comm.rank == 0:
        rows = []
        for tp in layouts:
            dp = n // tp
            replica = args.global_batch // dp
            hw = replace(emulated_hardware(profiles[tp], rates, float("inf")),
                         name=f"this machine, {n} MPI ranks", gpus_per_node=n, intra_node_bw=beta,
                         intra_node_latency=alpha)
            layout = Layout(tp, dp, replica, vocab_parallel=False)
            result = simulate_shard(profiles[tp], layout, lambda nbytes, tp=tp: ring(nbytes, tp, beta, alpha), hw,
                                    hidden, order="naive")
            median = statistics.median(measured[tp])
            rows.append({"model": args.model, "ranks": n, "layout": layout.label(), "tp": tp, "dp": dp,
                         "repeats": args.repeats, "measured_s": median, "measured_s_min": min(measured[tp]),
                         "measured_s_max": max(measured[tp]), "predicted_s": result.time,
                         "measured_over_predicted": median / result.time, "tp_allreduce_s": result.tp_comm_s,
                         "allreduce_alpha_us": alpha * 1e6, "allreduce_beta_MBs": beta / 1e6,
                         "source": f"measured on cpu ({n} MPI ranks, in core; {args.repeats} interleaved repeats of "
                                   f"{args.steps} steps); predicted by karma/parallel/megatron_model.py on the "
                                   "measured "
                                   f"shard profiles"})
        df = pd.DataFrame(rows)
        ratios = [t / d for t, d in zip(measured[n], measured[1], strict=True)]
        df["tp_over_dp_measured"] = statistics.median(ratios)
        df["tp_over_dp_measured_min"] = min(ratios)
        df["tp_over_dp_measured_max"] = max(ratios)
        df["tp_over_dp_predicted"] = df.predicted_s.iloc[1] / df.predicted_s.iloc[0]
    return write_table(comm, df, args.out)


if __name__ == "__main__":
    sys.exit(main())
