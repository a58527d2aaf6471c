#!/usr/bin/python3
"""Trains the same MLP with troupe and with PyTorch, side by side, and prints the ratio.

Same model (784-256-256-10, ReLU), same optimizer (Adam, lr 1e-3), same batch, same
data (Fashion-MNIST from dataset-fashion-mnist, shuffled), one thread each, pinned to
the same core with taskset. Each repetition runs troupe and then PyTorch, so both see
the same machine noise; the table shows medians over the repetitions. Time is measured
from the first training step to the end of the last one (data loading excluded). PyTorch's
Adam is its fastest CPU one (foreach=True: 1.13's default updates one tensor at a time).
--cpu-gemm openblas,onednn runs troupe once per library of its CPU GEMM ([run] cpu_gemm).

    /usr/bin/python3 bench/mlp_vs_pytorch.py [--batches 32,256] [--repeats 5] [--core 0]
                                             [--cpu-gemm auto]

Run from the repository root after scripts/build.sh. Not part of ctest.
"""
import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from config_text import mlp
from peer_env import pytorch_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = "/usr/share/datasets/fashion-mnist"

CONFIG = """
[run]
steps = {steps}
seed = 1
evaluate = false
log_every = 1000000

[data]
source = "fashion-mnist"
path = "{data}"
batch_size = {batch}
prefetch = 2

""" + mlp([256, 256, 10], init="torch") + """
[optimizer]
type = "adam"
lr = 1e-3

[parallel]
devices = ["cpu:0"]
"""

# The PyTorch side's start, shared with bench/dp_vs_ddp.py: one thread, seed 1, the
# normalised training set in x_all / y_all (read from `data`), and the MLP in `model`.
TORCH_PROLOGUE = r"""
import gzip, os, sys, time, numpy as np, torch
torch.set_num_threads(1)
torch.manual_seed(1)
# --precision bf16: the forward under PyTorch's mixed precision (run_pytorch sets it)
AUTOCAST = os.environ.get("TROUPE_BENCH_PRECISION") == "bf16"
def load(data):
    with gzip.open(data + "/train-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)
    with gzip.open(data + "/train-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    return (torch.from_numpy(((images / 255.0 - 0.2860) / 0.3530).astype(np.float32)),
            torch.from_numpy(labels.astype(np.int64)))
x_all, y_all = load(sys.argv[3])
model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                            torch.nn.Linear(256, 256), torch.nn.ReLU(),
                            torch.nn.Linear(256, 10))
"""

PYTORCH = TORCH_PROLOGUE + r"""
batch, steps = int(sys.argv[1]), int(sys.argv[2])
opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
loss_fn = torch.nn.CrossEntropyLoss()
per_epoch = x_all.shape[0] // batch
order = torch.randperm(x_all.shape[0])
start = time.perf_counter()
for step in range(steps):
    if step % per_epoch == 0 and step > 0:
        order = torch.randperm(x_all.shape[0])
    idx = order[(step % per_epoch) * batch:(step % per_epoch + 1) * batch]
    x, y = x_all[idx], y_all[idx]
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=AUTOCAST):
        loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    loss.item()  # what troupe reports per step
elapsed = time.perf_counter() - start
print(steps * batch / elapsed)
"""


def run_troupe(binary, config_text, name, core, workdir):
    """Runs troupe on `config_text` pinned to `core`; its samples/s from the metrics."""
    config = os.path.join(workdir, f"{name}.toml")
    metrics = os.path.join(workdir, f"{name}.jsonl")
    with open(config, "w") as f:
        f.write(config_text)
    subprocess.run(["taskset", "-c", str(core), binary, "run", config, "--quiet",
                    "--metrics", metrics], check=True, stdout=subprocess.DEVNULL)
    with open(metrics) as f:
        done = [json.loads(line) for line in f if '"event"' in line][-1]
    return done["samples_per_s"]


def run_pytorch(script, batch, steps, core, precision="fp32"):
    """Runs a PyTorch `script` (argv: batch, steps, data) pinned to `core`, its forward under
    torch.autocast when `precision` is bf16; its samples/s."""
    out = subprocess.run(["taskset", "-c", str(core), "/usr/bin/python3", "-c", script,
                          str(batch), str(steps), DATA],
                         check=True, capture_output=True, text=True,
                         env=pytorch_env(TROUPE_BENCH_PRECISION=precision))
    return float(out.stdout.strip().splitlines()[-1])


def side_by_side(description, title, troupe_config, pytorch_script, default_batches,
                 default_samples):
    """The whole benchmark: arguments, troupe and PyTorch in turn per repetition, the table.
    troupe_config(batch, steps) gives the config text; pytorch_script trains the same."""
    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default=default_batches)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--core", type=int, default=0)
    parser.add_argument("--samples", type=int, default=default_samples,
                        help="training samples per run (steps = samples / batch)")
    parser.add_argument("--binary", default=os.path.join(ROOT, "build", "troupe"))
    parser.add_argument("--cpu-gemm", default="auto",
                        help="troupe's [run] cpu_gemm, or several (openblas,onednn): a run each")
    parser.add_argument("--precision", default="fp32",
                        help="fp32, bf16 or both (fp32,bf16): troupe's [run] precision, and "
                             "PyTorch in fp32 or under torch.autocast(bfloat16)")
    args = parser.parse_args()
    if not os.path.exists(args.binary):
        sys.exit(f"no troupe binary at {args.binary}: run scripts/build.sh first")
    variants = [(library, precision) for precision in args.precision.split(",")
                for library in args.cpu_gemm.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for batch in [int(b) for b in args.batches.split(",")]:
            steps = max(20, args.samples // batch)
            troupe_rates = {variant: [] for variant in variants}
            torch_rates = {precision: [] for precision in args.precision.split(",")}
            for r in range(args.repeats):
                for library, precision in variants:
                    config = troupe_config(batch, steps).replace(
                        "[run]\n", f'[run]\ncpu_gemm = "{library}"\nprecision = "{precision}"\n',
                        1)
                    troupe_rates[(library, precision)].append(run_troupe(
                        args.binary, config, f"bench_b{batch}", args.core, workdir))
                for precision in torch_rates:
                    torch_rates[precision].append(
                        run_pytorch(pytorch_script, batch, steps, args.core, precision))
                mine = ", ".join(f"troupe ({library}, {precision}) {rates[-1]:.0f}"
                                 for (library, precision), rates in troupe_rates.items())
                theirs = ", ".join(f"pytorch ({precision}) {rates[-1]:.0f}"
                                   for precision, rates in torch_rates.items())
                print(f"batch {batch} run {r + 1}: {mine}, {theirs} samples/s", file=sys.stderr)
            for (library, precision), rates in troupe_rates.items():
                ratios = [a / b for a, b in zip(rates, torch_rates[precision])]
                rows.append((batch, steps, library, precision, statistics.median(rates),
                             statistics.median(torch_rates[precision]),
                             statistics.median(ratios), min(ratios), max(ratios)))
    print(f"\n{title}, one core (taskset -c {args.core}), {args.repeats} runs each, medians; "
          f"PyTorch bf16 = torch.autocast")
    print(f"{'batch':>6} {'steps':>6} {'cpu_gemm':>9} {'precision':>9} {'troupe samples/s':>17} "
          f"{'pytorch samples/s':>18} {'ratio':>6} {'(min-max)':>12}")
    for batch, steps, library, precision, t, p, ratio, lo, hi in rows:
        print(f"{batch:>6} {steps:>6} {library:>9} {precision:>9} {t:>17.0f} {p:>18.0f} "
              f"{ratio:>6.2f} {f'({lo:.2f}-{hi:.2f})':>12}")


def curves_arguments(description, length, default):
    """The arguments of a benchmark's --curves mode: DIR, `--<length>` (epochs or steps)
    and the binary."""
    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--curves", required=True)
    parser.add_argument(f"--{length}", type=int, default=default)
    parser.add_argument("--binary", default=os.path.join(ROOT, "build", "troupe"))
    return parser.parse_args()


def plot_curves(binary, directory, mine, theirs):
    """troupe's and PyTorch's metrics on shared axes: DIR/curves.svg."""
    subprocess.run([binary, "plot", mine, theirs, "--labels", "troupe,PyTorch 1.13", "-o",
                    os.path.join(directory, "curves.svg")], check=True)


def main():
    side_by_side(__doc__, "MLP 784-256-256-10, Adam",
                 lambda batch, steps: CONFIG.format(steps=steps, batch=batch, data=DATA),
                 PYTORCH, "32,256", 120000)


if __name__ == "__main__":
    main()
