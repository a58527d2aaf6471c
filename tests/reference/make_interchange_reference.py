#!/usr/bin/python3
"""Generates interchange_reference.json and interchange_initial.safetensors: PyTorch's own
trajectory of the shipped MLP (config/fashion_mlp.toml: 784-256-relu-256-relu-10) for 20
steps on Fashion-MNIST, from initial weights PyTorch drew, with SGD (momentum) and with Adam.

tests/actors/session/pytorch_trajectory_test.cpp starts troupe from interchange_initial.safetensors
([model] init_from), trains the same 20 batches with the same optimizer settings and
compares each step's loss and the final parameters with what is recorded here. Run once and
commit both outputs (the weights file is ~1 MB: the shipped MLP's 269,322 parameters):

    /usr/bin/python3 tests/reference/make_interchange_reference.py tests/reference

What it mirrors of troupe, so that the two compute the same thing:
- data: the first 20 * 64 training samples in file order ([data] shuffle = false gives step
  k the samples [64k, 64(k+1))), each pixel v normalised as runtime/data/dataset.cpp does,
  (v / 255 - 0.2860) / 0.3530 in double, rounded once to float32;
- loss: cross-entropy averaged over the batch (troupe's softmax_xent scales by 1/B), and a
  step's loss is the one computed with that step's parameters, before the update;
- optimizers: torch.optim.SGD / Adam single-tensor code path (foreach=False), constant
  learning rate, as the CPU kernels mirror (tests/reference/make_optimizer_reference.py);
- names: the nn.Sequential's state_dict names ("0.weight" (256, 784), "0.bias", "2.weight",
  ...), the names troupe's checkpoints and init_from use (Note [checkpoint names]).

The final parameters are ~270K floats, too many to commit twice; each tensor is kept as a
digest: its sum, its sum of squares, the sum of squares of its change from the initial
weights, and SAMPLES values at fixed pseudo-random flat indices (with the initial value
there). Numbers are float32 values widened to double and printed with repr(), so the C++
side reads them back exactly.

The safetensors file is written with the standard library (struct, json): no safetensors
package is needed. It is what safetensors.torch.save_file writes: header length (u64 LE),
JSON header padded with spaces to 8 bytes, {"__metadata__": {"format": "pt"}, ...}, then
the raw little-endian float32 data.
"""
import gzip
import json
import os
import random
import re
import struct
import sys

import torch

DATA = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # runtime/data/dataset.cpp: fashion_mean, fashion_std
SIZES = [784, 256, 256, 10]
BATCH = 64
STEPS = 20
TORCH_SEED = 0
SAMPLES = 64  # sampled values per parameter tensor
WEIGHTS_FILE = "interchange_initial.safetensors"

# name, optimizer class, arguments: the same numbers go into the troupe config of the test.
RUNS = [
    ("sgd_momentum", "sgd", torch.optim.SGD,
     dict(lr=0.05, momentum=0.9, dampening=0.0, nesterov=False, weight_decay=0.0)),
    ("adam", "adam", torch.optim.Adam,
     dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)),
]


def read_idx(path, magic, header_words, count, item_bytes):
    """The first `count` items of an IDX .gz file, as bytes."""
    with gzip.open(path, "rb") as f:
        header = struct.unpack(">" + "I" * header_words, f.read(4 * header_words))
        if header[0] != magic or header[1] < count:
            sys.exit(f"{path}: unexpected IDX header {header}")
        data = f.read(count * item_bytes)
    if len(data) != count * item_bytes:
        sys.exit(f"{path}: truncated")
    return data


def load_batches():
    count = BATCH * STEPS
    pixels = read_idx(os.path.join(DATA, "train-images-idx3-ubyte.gz"), 0x803, 4, count, 784)
    labels = read_idx(os.path.join(DATA, "train-labels-idx1-ubyte.gz"), 0x801, 2, count, 1)
    # As troupe: a table of the 256 byte values, in double, rounded once to float32.
    table = torch.tensor([(v / 255.0 - MEAN) / STD for v in range(256)], dtype=torch.float32)
    x = table[torch.frombuffer(bytearray(pixels), dtype=torch.uint8).long()].reshape(count, 784)
    y = torch.frombuffer(bytearray(labels), dtype=torch.uint8).long()
    return [(x[k * BATCH:(k + 1) * BATCH], y[k * BATCH:(k + 1) * BATCH]) for k in range(STEPS)]


def make_model():
    layers = []
    for i in range(len(SIZES) - 1):
        layers.append(torch.nn.Linear(SIZES[i], SIZES[i + 1]))
        if i + 2 < len(SIZES):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def write_safetensors(path, state):
    """safetensors.torch.save_file's format, with the standard library."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, tensor in state.items():
        t = tensor.detach().contiguous().to(torch.float32)
        blob = struct.pack("<%df" % t.numel(), *t.flatten().tolist())
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def digest(final, initial, rng):
    flat, start = final.detach().flatten(), initial.flatten()
    indices = sorted(rng.sample(range(flat.numel()), min(SAMPLES, flat.numel())))
    wide, change = flat.double(), (flat.double() - start.double())
    return {
        "shape": list(final.shape),
        "sum": float(wide.sum()),
        "sum_squares": float((wide * wide).sum()),
        "change_sum_squares": float((change * change).sum()),
        "samples": [[i, float(flat[i]), float(start[i])] for i in indices],
    }


def train(initial, batches, optimizer_class, arguments):
    model = make_model()
    model.load_state_dict(initial, strict=True)
    optimizer = optimizer_class(model.parameters(), foreach=False, **arguments)
    loss_function = torch.nn.CrossEntropyLoss()  # mean over the batch
    losses = []
    for x, y in batches:
        optimizer.zero_grad()
        loss = loss_function(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    return losses, model.state_dict()


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    torch.set_num_threads(1)
    torch.manual_seed(TORCH_SEED)
    initial = {k: v.clone() for k, v in make_model().state_dict().items()}
    write_safetensors(os.path.join(out_dir, WEIGHTS_FILE), initial)
    batches = load_batches()
    runs = []
    for name, optimizer, optimizer_class, arguments in RUNS:
        losses, final = train(initial, batches, optimizer_class, arguments)
        hyper = dict(arguments)
        if "betas" in hyper:
            hyper["beta1"], hyper["beta2"] = hyper.pop("betas")
        rng = random.Random(name)  # the same indices every time the script runs
        runs.append({
            "name": name,
            "optimizer": optimizer,
            "hyper": hyper,
            "losses": losses,
            "final": {k: digest(v, initial[k], rng) for k, v in final.items()},
        })
    document = {
        "generator": "tests/reference/make_interchange_reference.py",
        "torch_version": torch.__version__,
        "torch_seed": TORCH_SEED,
        "initial_weights": WEIGHTS_FILE,
        "data": {"path": DATA, "mean": MEAN, "std": STD, "shuffle": False},
        "sizes": SIZES,
        "batch_size": BATCH,
        "steps": STEPS,
        "runs": runs,
    }
    text = json.dumps(document, indent=1)
    # One line per vector of numbers, so the file reads (and diffs) by record.
    text = re.sub(r"\[[-0-9.e,\s]*\]", lambda m: " ".join(m.group(0).split()), text)
    with open(os.path.join(out_dir, "interchange_reference.json"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
