#!/usr/bin/python3
"""Trains the same conv net with troupe and with PyTorch, side by side, and prints the ratio.

The model of config/fashion_cnn.toml (conv 3x3 32, relu, max pool 2, conv 3x3 64, relu,
max pool 2, linear 3136-128, relu, linear 10), Adam lr 1e-3, the same batch, Fashion-MNIST
from dataset-fashion-mnist, one thread each, pinned to the same core with taskset. Each
repetition runs troupe and then PyTorch (whose convolutions run on oneDNN, MKL-DNN 2.6 in
Debian's build), so both see the same machine noise; the table shows medians. Time is
measured from the first training step to the end of the last one (data loading excluded).

    /usr/bin/python3 bench/cnn_vs_pytorch.py [--batches 64,128] [--repeats 5] [--core 0]
    /usr/bin/python3 bench/cnn_vs_pytorch.py --curves DIR [--epochs 5]

--curves trains both for whole epochs instead, troupe with config/fashion_cnn.toml as
shipped and PyTorch with the same optimizer, schedule (linear warm-up over 100 steps, cosine
to 1e-5) and batch, each on its own core, writing the same JSON lines (DIR/troupe.jsonl,
DIR/pytorch.jsonl: training loss per step, test accuracy and loss per epoch), and draws them
with `troupe plot` into DIR/curves.svg.

Run from the repository root after scripts/build.sh. Not part of ctest.
"""
import os
import subprocess
import sys

from mlp_vs_pytorch import curves_arguments, plot_curves, DATA, ROOT, TORCH_PROLOGUE, side_by_side
from peer_env import pytorch_env

CONFIG_FILE = os.path.join(ROOT, "config", "fashion_cnn.toml")

PYTORCH = TORCH_PROLOGUE + r"""
batch, steps = int(sys.argv[1]), int(sys.argv[2])
nn = torch.nn
model = nn.Sequential(nn.Unflatten(1, (1, 28, 28)),
                      nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))
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


def troupe_config(batch, steps):
    """config/fashion_cnn.toml with the bench's batch and steps, no evaluation or log."""
    with open(CONFIG_FILE) as f:
        text = f.read()
    text = text.replace("batch_size = 64", f"batch_size = {batch}", 1)
    text = text.replace("[run]\n", f"[run]\nsteps = {steps}\nevaluate = false\n", 1)
    text = text.replace('path = "/usr/share/datasets/fashion-mnist"', f'path = "{DATA}"', 1)
    return text.replace("log_every = 100", "log_every = 1000000", 1)


# The PyTorch side of --curves: argv epochs, data, metrics path. The test set is
# normalised as troupe normalises it; evaluation after every epoch, in batches of 1000.
PYTORCH_CURVES = TORCH_PROLOGUE.replace("x_all, y_all = load(sys.argv[3])", "") + r"""
import json, math
epochs, data, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
def load_split(prefix):
    with gzip.open(f"{data}/{prefix}-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)
    with gzip.open(f"{data}/{prefix}-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    return (torch.from_numpy(((images / 255.0 - 0.2860) / 0.3530).astype(np.float32)),
            torch.from_numpy(labels.astype(np.int64)))
x_all, y_all = load_split("train")
x_test, y_test = load_split("t10k")
nn = torch.nn
model = nn.Sequential(nn.Unflatten(1, (1, 28, 28)),
                      nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))
batch, warmup, min_lr, lr = 64, 100, 1e-5, 1e-3
per_epoch = x_all.shape[0] // batch
total = epochs * per_epoch
def factor(step):  # troupe's cosine schedule with linear warm-up, as a multiple of lr
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return (min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * progress))) / lr
opt = torch.optim.Adam(model.parameters(), lr=lr, foreach=True)
schedule = torch.optim.lr_scheduler.LambdaLR(opt, factor)
loss_fn = nn.CrossEntropyLoss()
step = 0
with open(out, "w") as metrics:
    for epoch in range(epochs):
        model.train()
        order = torch.randperm(x_all.shape[0])
        for i in range(per_epoch):
            idx = order[i * batch:(i + 1) * batch]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x_all[idx]), y_all[idx])
            loss.backward()
            opt.step()
            schedule.step()
            metrics.write(json.dumps({"epoch": epoch, "loss": loss.item(), "step": step}) + "\n")
            step += 1
        model.eval()
        correct, loss_sum = 0, 0.0
        with torch.no_grad():
            for i in range(0, x_test.shape[0], 1000):
                logits = model(x_test[i:i + 1000])
                loss_sum += loss_fn(logits, y_test[i:i + 1000]).item() * logits.shape[0]
                correct += (logits.argmax(1) == y_test[i:i + 1000]).sum().item()
        metrics.write(json.dumps({"epoch": epoch, "step": step, "test_accuracy":
                                  correct / x_test.shape[0], "test_loss":
                                  loss_sum / x_test.shape[0]}) + "\n")
        metrics.flush()
        print(f"epoch {epoch + 1}: test accuracy {correct / x_test.shape[0]:.4f}", flush=True)
"""


def curves(directory, epochs, binary):
    """Both trainings at once (each on its own core), then the picture."""
    os.makedirs(directory, exist_ok=True)
    mine, theirs = os.path.join(directory, "troupe.jsonl"), os.path.join(directory, "pytorch.jsonl")
    config = os.path.join(directory, "fashion_cnn.toml")
    with open(CONFIG_FILE) as f:
        text = f.read().replace("epochs = 5", f"epochs = {epochs}", 1)
    with open(config, "w") as f:
        f.write(text.replace('path = "/usr/share/datasets/fashion-mnist"', f'path = "{DATA}"', 1))
    troupe = subprocess.Popen(["taskset", "-c", "0", binary, "run", config, "--quiet",
                               "--metrics", mine], stdout=subprocess.DEVNULL)
    subprocess.run(["taskset", "-c", "1", "/usr/bin/python3", "-c", PYTORCH_CURVES, str(epochs),
                    DATA, theirs], check=True, env=pytorch_env())
    if troupe.wait() != 0:
        sys.exit("troupe run failed")
    plot_curves(binary, directory, mine, theirs)


def main():
    if "--curves" in sys.argv:
        args = curves_arguments(__doc__, "epochs", 5)
        curves(args.curves, args.epochs, args.binary)
        return
    side_by_side(__doc__, "conv net of config/fashion_cnn.toml, Adam", troupe_config, PYTORCH,
                 "64,128", 12800)


if __name__ == "__main__":
    main()
