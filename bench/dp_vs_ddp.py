#!/usr/bin/python3
"""Data-parallel scaling of troupe next to PyTorch DDP's, on this machine, in one run.

The MLP of bench/parallel_scaling.py (784-256-256-10, ReLU, Adam lr 1e-3) on Fashion-MNIST,
same global batch everywhere:
  troupe   one device (cpu:0, pinned to core 0) vs  DP2 (cpu:0 + cpu:1, ring all-reduce,
           sharded optimizer: config/fashion_mlp_dp2.toml's wiring)
  PyTorch  one process (1 thread, core 0) vs  DDP, 2 processes (gloo, 1 thread each,
           pinned to core 0 and core 1), each rank training on its half of the batch.
Each repetition runs all four, alternating, so they share the machine's noise; the table
shows medians of samples/s and of the speed-ups. Time runs from the first training step
to the end of the last (PyTorch: after a barrier; data loading excluded in both).

    /usr/bin/python3 bench/dp_vs_ddp.py [--batches 128,256,512] [--repeats 5] [--steps 300]

Run from the repository root after scripts/build.sh, on an otherwise idle machine. Not
part of ctest.
"""
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mlp_vs_pytorch import TORCH_PROLOGUE  # noqa: E402
from parallel_scaling import DP2_SHARDED, dp_runs, main_arguments  # noqa: E402
from peer_env import pytorch_env

DATA = "/usr/share/datasets/fashion-mnist"

# argv: batch steps data world rank port. Prints samples/s (rank 0). Seed 1 on every
# rank: the same initial parameters and sample order everywhere.
TORCH = TORCH_PROLOGUE + r"""
import torch.distributed as dist
batch, steps, world, rank, port = sys.argv[1], sys.argv[2], sys.argv[4], sys.argv[5], sys.argv[6]
batch, steps, world, rank = int(batch), int(steps), int(world), int(rank)
if world > 1:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
loss_fn = torch.nn.CrossEntropyLoss()
per_epoch = x_all.shape[0] // batch
share = batch // world
order = torch.randperm(x_all.shape[0])
if world > 1:
    dist.barrier()
start = time.perf_counter()
for step in range(steps):
    if step % per_epoch == 0 and step > 0:
        order = torch.randperm(x_all.shape[0])
    first = (step % per_epoch) * batch + rank * share
    idx = order[first:first + share]
    x, y = x_all[idx], y_all[idx]
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    loss.item()
if world > 1:
    dist.barrier()
elapsed = time.perf_counter() - start
if rank == 0:
    print(steps * batch / elapsed)
"""


def run_torch(batch, steps, world, port):
    env = pytorch_env()
    ranks = [subprocess.Popen(["taskset", "-c", str(r), "/usr/bin/python3", "-c", TORCH,
                               str(batch), str(steps), DATA, str(world), str(r), str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for r in range(world)]
    outputs = [p.communicate() for p in ranks]
    for p, (out, err) in zip(ranks, outputs):
        if p.returncode != 0:
            sys.exit(f"PyTorch run failed:\n{err}")
    return float(outputs[0][0].strip().splitlines()[-1])


def main():
    args = main_arguments(__doc__, repeats=5, batches="128,256,512")
    rows = []
    port = 29500 + os.getpid() % 1000
    with tempfile.TemporaryDirectory() as workdir:
        for batch in [int(b) for b in args.batches.split(",")]:
            t1, t2, p1, p2 = [], [], [], []
            for r in range(args.repeats):
                a, b = dp_runs(args, batch, workdir, [DP2_SHARDED])
                t1.append(a)
                t2.append(b)
                p1.append(run_torch(batch, args.steps, 1, port))
                port += 1
                p2.append(run_torch(batch, args.steps, 2, port))
                port += 1
                print(f"batch {batch} run {r + 1}: troupe {t1[-1]:.0f} -> {t2[-1]:.0f}, "
                      f"pytorch {p1[-1]:.0f} -> {p2[-1]:.0f} samples/s", file=sys.stderr)
            rows.append((batch, statistics.median(t1), statistics.median(t2),
                         statistics.median(a / b for a, b in zip(t2, t1)),
                         statistics.median(p1), statistics.median(p2),
                         statistics.median(a / b for a, b in zip(p2, p1))))
    print(f"\nDP2 vs one device, same global batch, {args.steps} steps, medians of "
          f"{args.repeats} (samples/s)")
    print(f"{'batch':>6} {'troupe 1':>9} {'troupe DP2':>11} {'speed-up':>9} "
          f"{'torch 1':>8} {'torch DDP2':>11} {'speed-up':>9}")
    for batch, a, b, s, c, d, q in rows:
        print(f"{batch:>6} {a:>9.0f} {b:>11.0f} {s:>8.2f}x {c:>8.0f} {d:>11.0f} {q:>8.2f}x")


if __name__ == "__main__":
    main()
