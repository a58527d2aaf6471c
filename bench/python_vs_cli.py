#!/usr/bin/python3
"""A run started from Python against the same run from the CLI, and what a Python-fed
loader costs a batch: side by side, medians of --repeats alternating runs, each in a fresh
process.

1. Step rate (the final record's samples_per_s: training samples over the time from the
   first step to the last) of config/fashion_mlp.toml and config/fashion_mlp_dp2.toml for
   --steps steps: `troupe run --steps N` against troupe.run(cfg, steps=N) from
   /usr/bin/python3. The ratio Python / CLI is the issue's bar (>= 0.97).
2. The same MLP on Fashion-MNIST's training set as arrays: the CLI reading .npy files
   ([data] source = "npy") against troupe.data.arrays over the same arrays (read in place).
3. troupe.data.iterable over a torch DataLoader (TensorDataset of the normalised float32
   pixels, batch 128, shuffle, drop_last) against troupe.data.arrays of the same tensors:
   the step rates, the extra time a step (per batch) the Python-fed loader costs, and what
   the DataLoader alone takes to make a batch in the same process (its share of that cost).

PyTorch at its best here: one intra-op thread (torch.set_num_threads(1)).

    /usr/bin/python3 bench/python_vs_cli.py [--repeats 5] [--steps 2000] [--only-loader]

Run from the repository root after scripts/build.sh (build/troupe and build/python/troupe).
Not part of ctest.
"""
import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.path.join(ROOT, "build", "troupe")
ENV = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "build", "python"),
           OPENBLAS_CORETYPE=os.environ.get("OPENBLAS_CORETYPE", "Haswell"))
FASHION = "/usr/share/datasets/fashion-mnist"

PYTHON_RUN = """
import json, sys, numpy as np, troupe
cfg = troupe.Config.load(sys.argv[1])
data = None
if sys.argv[3] != "none":
    import torch
    torch.set_num_threads(1)
    x = np.load(sys.argv[3] + "/x.npy"); y = np.load(sys.argv[3] + "/y.npy")
    if sys.argv[4] == "arrays":
        data = troupe.data.arrays(x, y)
    else:
        from torch.utils.data import DataLoader, TensorDataset
        xs = torch.from_numpy((x.reshape(len(x), -1) / 255.0 - 0.2860) / 0.3530).float()
        ds = TensorDataset(xs, torch.from_numpy(y.astype(np.int64)))
        g = torch.Generator()
        def loader(epoch):
            g.manual_seed(epoch)
            return DataLoader(ds, batch_size=128, shuffle=True, drop_last=True, generator=g)
        data = troupe.data.iterable(loader, classes=10)
print(json.dumps(troupe.run(cfg, data=data, steps=int(sys.argv[2])).wait()))
"""


def cli_rate(config, steps):
    with tempfile.TemporaryDirectory() as work:
        metrics = os.path.join(work, "m.jsonl")
        subprocess.run([CLI, "run", config, "--steps", str(steps), "--quiet", "--metrics", metrics],
                       check=True, env=ENV, stdout=subprocess.DEVNULL)
        return json.loads(open(metrics).read().splitlines()[-1])["samples_per_s"]


def python_rate(config, steps, data="none", kind="arrays"):
    done = subprocess.run([sys.executable, "-c", PYTHON_RUN, config, str(steps), data, kind],
                          env=ENV, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"the Python run ({kind}) failed:\n{done.stderr}")
    out = done.stdout
    return json.loads(out.splitlines()[-1])["samples_per_s"]


def fashion_arrays(folder):
    """Fashion-MNIST's training images (uint8) and labels as .npy files, and a config of them."""
    with gzip.open(os.path.join(FASHION, "train-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)
    with gzip.open(os.path.join(FASHION, "train-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    np.save(os.path.join(folder, "x.npy"), x)
    np.save(os.path.join(folder, "y.npy"), y)
    text = open(os.path.join(ROOT, "config", "fashion_mlp.toml")).read()
    text = text.replace('source = "fashion-mnist"', 'source = "npy"\nfeatures = "x.npy"\n'
                        'targets = "y.npy"\nvalidation = 0.1\nscale = 0.00392156862745098\n'
                        'mean = 0.2860\nstd = 0.3530')
    path = os.path.join(folder, "npy.toml")
    open(path, "w").write(text)
    # For the arrays against the iterable: no hold-out (an iterable's batches are its own),
    # no evaluation.
    plain = os.path.join(folder, "plain.toml")
    open(plain, "w").write(text.replace("validation = 0.1", 'test_features = "x.npy"\ntest_targets = "y.npy"')
                           .replace("[run]", "[run]\nevaluate = false"))
    return path, plain


def table(rows, repeats):
    for name, runs in rows:
        rates = [[f() for f in runs] for _ in range(repeats)]  # alternating
        medians = [statistics.median(r[i] for r in rates) for i in range(len(runs))]
        yield name, medians


def cost_of_loader(folder, batches=400):
    """Seconds a batch the DataLoader alone takes here, and with troupe's conversion."""
    code = """
import sys, time, numpy as np, torch
sys.path.insert(0, sys.argv[2])
from troupe.data import _next_batch
torch.set_num_threads(1)
from torch.utils.data import DataLoader, TensorDataset
x = np.load(sys.argv[1] + "/x.npy"); y = np.load(sys.argv[1] + "/y.npy")
ds = TensorDataset(torch.from_numpy((x / 255.0 - 0.2860) / 0.3530).float(), torch.from_numpy(y.astype(np.int64)))
n = int(sys.argv[3])
it = iter(DataLoader(ds, batch_size=128, shuffle=True, drop_last=True)); next(it)
t = time.perf_counter()
for _ in range(n): next(it)
alone = (time.perf_counter() - t) / n
it = iter(DataLoader(ds, batch_size=128, shuffle=True, drop_last=True)); next(it)
t = time.perf_counter()
for i in range(n): _next_batch(it, 0, i)
print(alone, (time.perf_counter() - t) / n)
"""
    out = subprocess.run([sys.executable, "-c", code, folder, os.path.join(ROOT, "build", "python"),
                          str(batches)], check=True, env=ENV, capture_output=True, text=True).stdout
    return [float(v) for v in out.split()]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--only-loader", action="store_true", help="only the third table")
    args = parser.parse_args()
    steps = args.steps
    mlp = os.path.join(ROOT, "config", "fashion_mlp.toml")
    dp2 = os.path.join(ROOT, "config", "fashion_mlp_dp2.toml")
    print(f"step rates, samples/s (medians of {args.repeats}, {steps} steps)")
    print(f"{'run':44s} {'CLI':>10s} {'Python':>10s} {'ratio':>7s}")
    with tempfile.TemporaryDirectory() as folder:
        npy, plain = fashion_arrays(folder)
        rows = [
            ("fashion_mlp (IDX files)", [lambda: cli_rate(mlp, steps), lambda: python_rate(mlp, steps)]),
            ("fashion_mlp_dp2 (IDX files)", [lambda: cli_rate(dp2, steps), lambda: python_rate(dp2, steps)]),
            ("fashion_mlp: .npy files / troupe.data.arrays",
             [lambda: cli_rate(npy, steps), lambda: python_rate(npy, steps, folder, "arrays")]),
        ]
        for name, (cli, py) in table([] if args.only_loader else rows, args.repeats):
            print(f"{name:44s} {cli:10.0f} {py:10.0f} {py / cli:7.3f}")
        fed = [("fashion_mlp: arrays / iterable(DataLoader)",
                [lambda: python_rate(plain, steps, folder, "arrays"),
                 lambda: python_rate(plain, steps, folder, "iterable")])]
        for name, (arrays, iterable) in table(fed, args.repeats):
            extra = 128 / iterable - 128 / arrays
            print(f"\n{name}: {arrays:.0f} and {iterable:.0f} samples/s (ratio {iterable / arrays:.3f}); "
                  f"the Python-fed loader costs {1e6 * extra:.0f} us a batch of 128")
        alone, converted = cost_of_loader(folder)
        print(f"the DataLoader alone makes a batch of 128 in {1e6 * alone:.0f} us; "
              f"with troupe's conversion (to float32 (B, D), int32 labels) {1e6 * converted:.0f} us")


if __name__ == "__main__":
    main()
