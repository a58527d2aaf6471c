#!/usr/bin/python3
"""Trains the same conv net with troupe and with PyTorch, side by side, and prints the ratio.

The model of config/fashion_cnn.toml (conv 3x3 32, relu, max pool 2, conv 3x3 64, relu,
max pool 2, linear 3136-128, relu, linear 10), Adam lr 1e-3, the same batch, Fashion-MNIST
from dataset-fashion-mnist, one thread each, pinned to the same core with taskset. Each
repetition runs troupe and then PyTorch (whose convolutions run on oneDNN, MKL-DNN 2.6 in
Debian's build), so both see the same machine noise; the table shows medians. Time is
measured from the first training step to the end of the last one (data loading excluded).

    /usr/bin/python3 bench/cnn_vs_pytorch.py [--batches 64,128] [--repeats 5] [--core 0]

Run from the repository root after scripts/build.sh. Not part of ctest.
"""
import os

from mlp_vs_pytorch import DATA, ROOT, TORCH_PROLOGUE, side_by_side

CONFIG_FILE = os.path.join(ROOT, "config", "fashion_cnn.toml")

PYTORCH = TORCH_PROLOGUE + r"""
batch, steps = int(sys.argv[1]), int(sys.argv[2])
nn = torch.nn
model = nn.Sequential(nn.Unflatten(1, (1, 28, 28)),
                      nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
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
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    loss.item()  # what troupe reports per step
elapsed = time.perf_counter() - start
print(steps * batch / elapsed)
"""


def troupe_config(batch, steps):
    """config/fashion_cnn.toml with the bench's batch and steps, no evaluation or log."""
    with open(CONFIG_FILE) as f:
        text = f.read()
    text = text.replace("batch_size = 64", f"batch_size = {batch}", 1)
    text = text.replace("[run]\n", f"[run]\nsteps = {steps}\nevaluate = false\n", 1)
    text = text.replace('path = "/usr/share/datasets/fashion-mnist"', f'path = "{DATA}"', 1)
    return text.replace("log_every = 100", "log_every = 1000000", 1)


def main():
    side_by_side(__doc__, "conv net of config/fashion_cnn.toml, Adam", troupe_config, PYTORCH,
                 "64,128", 12800)


if __name__ == "__main__":
    main()
