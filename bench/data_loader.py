#!/usr/bin/python3
"""troupe's data sources against PyTorch's DataLoader, side by side, and what they cost a run.

Three tables, each of medians over --repeats alternating runs:

1. Images decoded and augmented a second from a folder of Fashion-MNIST's 60000 training
   images as PNG files (written once under --data with PIL; torchvision's ImageFolder layout):
   troupe's image source (RandomCrop(28, padding=4) and a horizontal flip, as
   troupe_loader_bench's workers split each batch of 128) against torchvision's ImageFolder
   in a DataLoader (batch 128, shuffled, the same transforms and ToTensor, a loader that
   opens each file as gray) with the same number of workers; a DataLoader's start-up (its
   worker processes) is left out, the first 5 batches not timed.
2. Rows a second gathered at random (batches of 128) from a .npy of about 1 GB (Fashion-MNIST's
   training pixels as uint8, tiled 21 times: 1.26 million rows of 784): troupe's npy source
   mapped, read with pread, and from a copy in memory (each value as float32, unscaled); and
   NumPy's memory-mapped array indexed with the same batches and converted to a float tensor,
   as a Dataset over np.load(mmap_mode) would hand them to PyTorch.
3. The step rate of config/fashion_cnn.toml fed from the PNG folder (workers 1 and 2) against
   the same config from the IDX files, the same images, the same batches (tests hold the
   two to the same parameters bit for bit); one training device, so the decoding workers have
   the second core. Measured from the runs' metrics (samples/s over their steps).

PyTorch at its best here: one intra-op thread (torch.set_num_threads(1)) in every process.

    /usr/bin/python3 bench/data_loader.py [--repeats 3] [--data /tmp/troupe-bench-data]
                                          [--steps 400] [--skip npy]

Needs Debian's python3-torchvision (scripts/install-deps.sh --bench). Run from the repository
root after scripts/build.sh (the troupe binary and build/troupe_loader_bench). Not part of ctest.
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
from peer_env import pytorch_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FASHION = "/usr/share/datasets/fashion-mnist"
BENCH = os.path.join(ROOT, "build", "troupe_loader_bench")
TROUPE = os.path.join(ROOT, "build", "troupe")

TORCH_IMAGES = r"""
import sys, time, torch, torchvision.transforms as T
from PIL import Image
from torchvision.datasets import ImageFolder
torch.set_num_threads(1)
root, workers, batches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def gray(path):
    with open(path, "rb") as f:
        return Image.open(f).convert("L")
data = ImageFolder(root, loader=gray, transform=T.Compose([
    T.RandomCrop(28, padding=4), T.RandomHorizontalFlip(), T.ToTensor()]))
loader = torch.utils.data.DataLoader(data, batch_size=128, shuffle=True, num_workers=workers,
                                     worker_init_fn=lambda _: torch.set_num_threads(1))
it = iter(loader)
for _ in range(5):
    next(it)
start = time.perf_counter()
for _ in range(batches):
    x, y = next(it)
print(batches * 128 / (time.perf_counter() - start))
"""

TORCH_NPY = r"""
import sys, time, numpy as np, torch
torch.set_num_threads(1)
x = np.load(sys.argv[1], mmap_mode="r")
rng = np.random.default_rng(7)
rows, start = 0, time.perf_counter()
while time.perf_counter() - start < 3:
    picked = np.sort(rng.integers(0, x.shape[0], 128))  # fancy indexing reads in order anyway
    batch = torch.from_numpy(x[picked].astype(np.float32))
    rows += 128
print(rows / (time.perf_counter() - start))
"""


def idx(path, offset):
    with gzip.open(path) as f:
        return np.frombuffer(f.read(), np.uint8, offset=offset)


def write_png_folder(root):
    """Fashion-MNIST's training and test images as train/<label>/<index>.png, once."""
    from PIL import Image
    if os.path.exists(os.path.join(root, "done")):
        return
    for split, prefix in (("train", "train"), ("test", "t10k")):
        images = idx(f"{FASHION}/{prefix}-images-idx3-ubyte.gz", 16).reshape(-1, 28, 28)
        labels = idx(f"{FASHION}/{prefix}-labels-idx1-ubyte.gz", 8)
        for c in range(10):
            os.makedirs(os.path.join(root, split, str(c)), exist_ok=True)
        for i, (image, label) in enumerate(zip(images, labels)):
            Image.fromarray(image, mode="L").save(os.path.join(root, split, str(label), f"{i:05d}.png"))
    open(os.path.join(root, "done"), "w").close()


def write_npy(path):
    """Fashion-MNIST's training pixels tiled to about 1 GB of uint8 rows, once."""
    if os.path.exists(path):
        return
    images = idx(f"{FASHION}/train-images-idx3-ubyte.gz", 16).reshape(-1, 784)
    np.save(path, np.tile(images, (21, 1)))


def json_line(command):
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def python_rate(script, *args):
    out = subprocess.run(["/usr/bin/python3", "-c", script, *map(str, args)], check=True,
                         capture_output=True, text=True, env=pytorch_env())
    return float(out.stdout.strip().splitlines()[-1])


def images_table(root, repeats):
    print("\nimages/s decoded, random crop (padding 4) and flip, batches of 128, Fashion-MNIST PNGs")
    print(f"{'workers':>8} {'troupe':>9} {'pytorch':>9} {'ratio':>6}")
    for workers in (1, 2):
        mine, theirs = [], []
        for _ in range(repeats):
            mine.append(json_line([BENCH, "images", os.path.join(root, "train"), "--workers",
                                   str(workers), "--crop", "4", "--flip", "--seconds", "3"])["images_per_s"])
            theirs.append(python_rate(TORCH_IMAGES, os.path.join(root, "train"), workers, 150))
        ratios = [a / b for a, b in zip(mine, theirs)]
        print(f"{workers:>8} {statistics.median(mine):>9.0f} {statistics.median(theirs):>9.0f} "
              f"{statistics.median(ratios):>6.2f}")


def npy_table(path, repeats):
    runs = [json_line([BENCH, "npy", path, "--seconds", "3"]) for _ in range(repeats)]
    torch_rates = [python_rate(TORCH_NPY, path) for _ in range(repeats)]
    size = os.path.getsize(path) / 2**30
    print(f"\nrows/s gathered at random (batches of 128), a {size:.2f} GiB .npy of "
          f"{runs[0]['rows']} rows of {runs[0]['features']} uint8, as float32")
    for name in ("mapped", "read", "memory"):
        print(f"  troupe {name:<7} {statistics.median(r[name] for r in runs):>10.0f}")
    print(f"  numpy mmap + torch.from_numpy {statistics.median(torch_rates):>10.0f}")


def cnn_rate(config_text, workdir, name):
    config = os.path.join(workdir, name + ".toml")
    metrics = os.path.join(workdir, name + ".jsonl")
    with open(config, "w") as f:
        f.write(config_text)
    subprocess.run([TROUPE, "run", config, "--quiet", "--metrics", metrics], check=True,
                   stdout=subprocess.DEVNULL)
    with open(metrics) as f:
        return [json.loads(line) for line in f if '"event"' in line][-1]["samples_per_s"]


def cnn_table(root, repeats, steps):
    with open(os.path.join(ROOT, "config", "fashion_cnn.toml")) as f:
        shipped = f.read()
    idx_config = shipped.replace("epochs = 5", f"steps = {steps}\nevaluate = false")
    idx_config = idx_config.replace('metrics = "../runs/fashion_cnn/metrics.jsonl"', "")
    def png_config(workers):
        png = (f'source = "images"\npath = "{root}/train"\ntest_path = "{root}/test"\n'
               f"channels = 1\nmean = 0.2860\nstd = 0.3530\nworkers = {workers}\n")
        return idx_config.replace('source = "fashion-mnist"', png).replace(
            'path = "/usr/share/datasets/fashion-mnist"', "")
    rates = {"idx": [], "png, 1 worker": [], "png, 2 workers": []}
    with tempfile.TemporaryDirectory() as workdir:
        for _ in range(repeats):
            rates["idx"].append(cnn_rate(idx_config, workdir, "idx"))
            for workers in (1, 2):
                key = f"png, {workers} worker" + ("s" if workers > 1 else "")
                rates[key].append(cnn_rate(png_config(workers), workdir, "png"))
    base = statistics.median(rates["idx"])
    print(f"\nconfig/fashion_cnn.toml, {steps} steps, samples/s (one device, cpu:0)")
    for name, values in rates.items():
        print(f"  {name:<16} {statistics.median(values):>8.0f}   {statistics.median(values) / base:.2f}x idx")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", default="/tmp/troupe-bench-data")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--skip", default="", help="comma-separated: images, npy, cnn")
    args = parser.parse_args()
    for binary in (BENCH, TROUPE):
        if not os.path.exists(binary):
            sys.exit(f"no {binary}: run scripts/build.sh first")
    skip = set(filter(None, args.skip.split(",")))
    root = os.path.join(args.data, "fashion-png")
    write_png_folder(root)
    if "images" not in skip:
        images_table(root, args.repeats)
    if "npy" not in skip:
        path = os.path.join(args.data, "fashion-1g.npy")
        write_npy(path)
        npy_table(path, args.repeats)
    if "cnn" not in skip:
        cnn_table(root, args.repeats, args.steps)


main()
