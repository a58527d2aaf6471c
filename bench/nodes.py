#!/usr/bin/python3
"""DP2 across two processes next to DP2 in one process and PyTorch DDP, in one run.

The MLP of bench/parallel_scaling.py (784-256-256-10, ReLU, Adam lr 1e-3) on Fashion-MNIST,
same global batch everywhere, one core per replica:
  troupe, one process   DP2 on cpu:0 + cpu:1 (ring all-reduce, sharded optimizer)
  troupe, two processes DP2 on node0/cpu:0 + node1/cpu:0 (`troupe launch -n 2`: node0's
                        cpu:0 on core 0, node1's on core 1), the ring over loopback TCP;
                        and the same with averaging = "gloo" (unsharded)
  PyTorch DDP           2 processes (gloo, 1 thread each, pinned to core 0 and core 1)
Each repetition runs all three, alternating, so they share the machine's noise; the table
shows medians of samples/s and of the ratio two processes / one process. Then the speed
of one tensor between two troupe nodes (`troupe_link_bench`, built next to troupe), and
the time of one layer's gradient all-reduce between two nodes, the actor ring next to gloo
(`troupe_allreduce_bench`).

    /usr/bin/python3 bench/nodes.py [--batches 128,256,512] [--repeats 5] [--steps 300]

Run from the repository root after scripts/build.sh, on an otherwise idle machine. Not
part of ctest.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dp_vs_ddp import run_torch  # noqa: E402
from parallel_scaling import DP2_SHARDED, MLP, main_arguments, run  # noqa: E402

NODES = ('[parallel]\ndevices = ["node0/cpu:0", "node1/cpu:0"]\ndata = 2\n'
         'averaging = "ring"\nshard_optimizer = true\n\n[cluster]\nnodes = 2\n')
NODES_GLOO = ('[parallel]\ndevices = ["node0/cpu:0", "node1/cpu:0"]\ndata = 2\n'
              'averaging = "gloo"\n\n[cluster]\nnodes = 2\nunauthenticated_gloo = true\n')


def run_launched(binary, text, workdir, name):
    """`troupe launch -n 2` on `text`; the coordinator's final record."""
    config = os.path.join(workdir, name + ".toml")
    metrics = os.path.join(workdir, name + ".jsonl")
    with open(config, "w") as f:
        f.write(text)
    subprocess.run([binary, "launch", "-n", "2", config, "--quiet", "--metrics", metrics],
                   check=True, stdout=subprocess.DEVNULL)
    with open(metrics) as f:
        return [json.loads(line) for line in f if '"event"' in line][-1]


def main():
    args = main_arguments(__doc__, repeats=5, batches="128,256,512")
    port = 29600 + os.getpid() % 1000
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for batch in [int(b) for b in args.batches.split(",")]:
            one, two, gloo, ddp = [], [], [], []
            for r in range(args.repeats):
                one.append(run(args.binary, MLP.format(steps=args.steps, batch=batch,
                                                       parallel=DP2_SHARDED),
                               workdir, "in-process")["samples_per_s"])
                two.append(run_launched(args.binary, MLP.format(steps=args.steps, batch=batch,
                                                                parallel=NODES),
                                        workdir, "two-processes")["samples_per_s"])
                gloo.append(run_launched(args.binary, MLP.format(steps=args.steps, batch=batch,
                                                                 parallel=NODES_GLOO),
                                         workdir, "two-processes-gloo")["samples_per_s"])
                ddp.append(run_torch(batch, args.steps, 2, port))
                port += 1
                print(f"batch {batch} run {r + 1}: one process {one[-1]:.0f}, two processes "
                      f"{two[-1]:.0f} (gloo {gloo[-1]:.0f}), DDP {ddp[-1]:.0f} samples/s",
                      file=sys.stderr)
            rows.append((batch, statistics.median(one), statistics.median(two),
                         statistics.median(b / a for a, b in zip(one, two)),
                         statistics.median(gloo), statistics.median(ddp)))
    print(f"\nDP2, one core per replica, same global batch, {args.steps} steps, medians of "
          f"{args.repeats} (samples/s)")
    print(f"{'batch':>6} {'1 process':>10} {'2 processes':>12} {'ratio':>7} {'2 proc. gloo':>13} "
          f"{'torch DDP':>10}")
    for batch, a, b, ratio, g, d in rows:
        print(f"{batch:>6} {a:>10.0f} {b:>12.0f} {ratio:>6.2f}x {g:>13.0f} {d:>10.0f}")

    link = os.path.join(os.path.dirname(args.binary), "troupe_link_bench")
    if os.path.exists(link):
        print("\nOne tensor between two troupe nodes over loopback (median of 9 rounds)")
        subprocess.run([link], check=True)
    else:
        print(f"\n(no {link}: build it with scripts/build.sh)")
    allreduce = os.path.join(os.path.dirname(args.binary), "troupe_allreduce_bench")
    if os.path.exists(allreduce):
        print("\nOne layer's gradients all-reduced between two troupe nodes over loopback, "
              "the actor ring vs gloo (median of 15 rounds)")
        subprocess.run([allreduce, "1", "16"], check=True)
    else:
        print(f"\n(no {allreduce}: build it with scripts/build.sh)")


if __name__ == "__main__":
    main()
