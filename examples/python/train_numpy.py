#!/usr/bin/env python3
"""Trains an MLP on NumPy arrays (scikit-learn's bundled handwritten digits, 8x8 pixels)
with troupe, and plots its loss and test accuracy with matplotlib into a PNG.

    PYTHONPATH=build/python python3 examples/python/train_numpy.py [plot.png]
"""
import sys

import matplotlib
matplotlib.use("Agg")  # no window: write the file
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_digits

import troupe

digits = load_digits()
x = (digits.data / 16.0).astype(np.float32)  # (1797, 64) pixels in [0, 1]
y = digits.target                              # (1797,) labels 0..9
order = np.random.default_rng(0).permutation(len(x))
train, test = order[:1400], order[1400:]

cfg = troupe.Config.from_dict({
    "run": {"epochs": 15, "seed": 1},
    "data": {"batch_size": 50, "eval_batch_size": 400},
    "model": {"loss": "softmax_xent",
              "layers": [{"type": "linear", "out": 64}, {"type": "relu"},
                         {"type": "linear", "out": 10}]},
    "optimizer": {"type": "adam", "lr": 0.003},
})
run = troupe.run(cfg, data=troupe.data.arrays(x[train], y[train], x[test], y[test]))

steps, losses, epochs, accuracies = [], [], [], []
for record in run.metrics():       # each record as the run makes it
    if "loss" in record:
        steps.append(record["step"])
        losses.append(record["loss"])
    elif "test_accuracy" in record and "event" not in record:
        epochs.append(record["step"])
        accuracies.append(record["test_accuracy"])
result = run.wait()
print(f"{result['steps']} steps, test accuracy {100 * result['test_accuracy']:.2f}%")

figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
left.plot(steps, losses)
left.set(xlabel="step", ylabel="training loss", yscale="log")
right.plot(epochs, accuracies, marker="o")
right.set(xlabel="step", ylabel="test accuracy", ylim=(0.8, 1.0))
figure.tight_layout()
output = sys.argv[1] if len(sys.argv) > 1 else "digits_training.png"
figure.savefig(output, dpi=100)
print(f"plot written to {output}")
assert result["test_accuracy"] > 0.9, "the MLP should learn the digits"
