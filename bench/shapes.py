#!/usr/bin/python3
"""A sweep of MLP shapes: troupe against PyTorch and against the step's GEMMs alone.

For each shape (hidden widths, depth, activation, batch) it trains the same MLP on random
data with troupe and with PyTorch 1.13 (one thread each, pinned to one core with taskset,
Adam; PyTorch at its best: the faster of its foreach=True and one-tensor-at-a-time Adam on
each shape, with glibc's malloc keeping freed memory as bench/peer_env.py says), and times the step's GEMMs alone through
troupe's own CPU gemm kernel, with the library the troupe run uses, on the same core (the
"floor": forward x W^T, backward dY W and dY^T X per layer, nothing else;
build/troupe_gemm_backends_bench floor). It prints troupe's share of the floor (floor time /
troupe's step time) and its ratio to PyTorch, medians of --repeats runs alternating the three.

    /usr/bin/python3 bench/shapes.py [--widths 128,1024] [--depths 2,6]
        [--activations relu,tanh,gelu] [--batches 64,512] [--repeats 3] [--core 0]
        [--cpu-gemm auto]

Issue 47's goals: every shape with layers >= 128 wide at batch >= 128 at >= 0.80 of its
floor and >= 1.2x PyTorch; at batch 32-64 >= 0.6 and >= 1.5x; none slower than PyTorch.
Run from the repository root after scripts/build.sh. Not part of ctest.
"""
import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile

from peer_env import pytorch_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FEATURES, CLASSES = 784, 10

CONFIG = """
[run]
steps = {steps}
seed = 1
evaluate = false
log_every = 1000000

cpu_gemm = "{cpu_gemm}"
precision = "{precision}"

[data]
source = "synthetic"
synthetic_features = {features}
synthetic_classes = {classes}
synthetic_train = {train}
synthetic_test = {batch}
batch_size = {batch}

{layers}
[optimizer]
type = "adam"
lr = 1e-3

[parallel]
devices = ["cpu:0"]
"""

PYTORCH = r"""
import sys, time, torch
torch.set_num_threads(1)
torch.manual_seed(1)
widths, act, batch, steps, features, classes, foreach = (
    [int(w) for w in sys.argv[1].split(",")], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]),
    int(sys.argv[5]), int(sys.argv[6]), sys.argv[7] == "foreach")
activation = {"relu": torch.nn.ReLU, "tanh": torch.nn.Tanh, "gelu": torch.nn.GELU}[act]
layers, previous = [], features
for w in widths:
    layers += [torch.nn.Linear(previous, w), activation()]
    previous = w
model = torch.nn.Sequential(*layers, torch.nn.Linear(previous, classes))
opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=foreach)
loss_fn = torch.nn.CrossEntropyLoss()
x_all = torch.randn(8 * batch, features)
y_all = torch.randint(0, classes, (8 * batch,))
def step(i):
    at = (i % 8) * batch
    x, y = x_all[at:at + batch], y_all[at:at + batch]
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    loss.item()
for i in range(5):
    step(i)
start = time.perf_counter()
for i in range(steps):
    step(i)
print(steps * batch / (time.perf_counter() - start))
"""

def layers_text(widths, activation):
    out = ""
    for w in widths:
        out += f'[[model.layers]]\ntype = "linear"\nout = {w}\ninit = "torch"\n'
        out += f'[[model.layers]]\ntype = "{activation}"\n'
    return out + f'[[model.layers]]\ntype = "linear"\nout = {CLASSES}\ninit = "torch"\n'


def pinned(core, command, env=None, **kwargs):
    env = env or dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    return subprocess.run(["taskset", "-c", str(core)] + command, check=True, env=env,
                          capture_output=True, text=True, **kwargs)


def troupe_rate(binary, widths, activation, batch, steps, core, workdir, cpu_gemm,
                precision="fp32"):
    config, metrics = os.path.join(workdir, "s.toml"), os.path.join(workdir, "s.jsonl")
    with open(config, "w") as f:
        f.write(CONFIG.format(steps=steps, features=FEATURES, classes=CLASSES, batch=batch,
                              cpu_gemm=cpu_gemm, precision=precision,
                              train=8 * batch, layers=layers_text(widths, activation)))
    pinned(core, [binary, "run", config, "--quiet", "--metrics", metrics])
    with open(metrics) as f:
        return [json.loads(line) for line in f if '"event"' in line][-1]["samples_per_s"]


def floor_rate(binary, widths, batch, steps, core, cpu_gemm):
    """The step's GEMMs alone through troupe's gemm kernel (gemm_backends.cpp's floor mode)."""
    sizes = ",".join(map(str, [FEATURES] + widths + [CLASSES]))
    out = pinned(core, [binary, "floor", sizes, str(batch), str(steps), cpu_gemm])
    return float(out.stdout.strip().splitlines()[-1])


def python_rate(script, arguments, core):
    """PyTorch's samples/s at its best: the faster of its two CPU Adams (foreach=True was the
    faster on the Intel VM; one tensor at a time on the AMD VM's 1024-wide layers)."""
    rates = []
    for adam in ("foreach", "single"):
        out = pinned(core, ["/usr/bin/python3", "-c", script] + [str(a) for a in arguments] + [adam],
                     env=pytorch_env(OPENBLAS_NUM_THREADS="1"))
        rates.append(float(out.stdout.strip().splitlines()[-1]))
    return max(rates)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--widths", default="128,1024")
    parser.add_argument("--depths", default="2,6")
    parser.add_argument("--activations", default="relu,tanh,gelu")
    parser.add_argument("--batches", default="64,512")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--core", type=int, default=0)
    parser.add_argument("--samples", type=int, default=20000,
                        help="training samples per run (steps = samples / batch, at least 30)")
    parser.add_argument("--binary", default=os.path.join(ROOT, "build", "troupe"))
    parser.add_argument("--cpu-gemm", default="auto", choices=["auto", "onednn", "openblas"],
                        help="troupe's [run] cpu_gemm, and the floor's library")
    args = parser.parse_args()
    floor_binary = os.path.join(os.path.dirname(args.binary), "troupe_gemm_backends_bench")
    for binary in (args.binary, floor_binary):
        if not os.path.exists(binary):
            sys.exit(f"no {binary}: run scripts/build.sh first")
    split = lambda text: text.split(",")
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for width, depth, activation, batch in itertools.product(
                [int(w) for w in split(args.widths)], [int(d) for d in split(args.depths)],
                split(args.activations), [int(b) for b in split(args.batches)]):
            widths, steps = [width] * depth, max(30, args.samples // batch)
            mine, theirs, floor = [], [], []
            for _ in range(args.repeats):
                mine.append(troupe_rate(args.binary, widths, activation, batch, steps, args.core,
                                        workdir, args.cpu_gemm))
                theirs.append(python_rate(PYTORCH, [",".join(map(str, widths)), activation,
                                                    batch, steps, FEATURES, CLASSES], args.core))
                floor.append(floor_rate(floor_binary, widths, batch, steps, args.core,
                                        args.cpu_gemm))
            share = statistics.median(m / f for m, f in zip(mine, floor))
            ratio = statistics.median(m / t for m, t in zip(mine, theirs))
            rows.append((width, depth, activation, batch, statistics.median(mine),
                         statistics.median(theirs), share, ratio))
            print(f"{width}x{depth} {activation} batch {batch}: troupe {rows[-1][4]:.0f}, "
                  f"pytorch {rows[-1][5]:.0f} samples/s; {share:.2f} of the floor, "
                  f"{ratio:.2f}x pytorch", file=sys.stderr)
    print(f"\nMLP {FEATURES}-(width x depth)-{CLASSES}, Adam, one core (taskset -c {args.core}), "
          f"cpu_gemm {args.cpu_gemm}, medians of {args.repeats}")
    print("| hidden | act | batch | troupe samples/s | PyTorch samples/s | share of GEMM floor "
          "| x PyTorch |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for width, depth, activation, batch, mine, theirs, share, ratio in rows:
        print(f"| {width} x {depth} | {activation} | {batch} | {mine:.0f} | {theirs:.0f} | "
              f"{share:.2f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
