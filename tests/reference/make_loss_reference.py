#!/usr/bin/python3
"""Generates loss_reference.json: losses and their gradients computed by PyTorch's own
torch.nn.functional.cross_entropy (with label_smoothing and ignore_index), mse_loss,
l1_loss, huber_loss and binary_cross_entropy_with_logits, on fixed inputs.

tests/actors/losses/loss_reference_test.cpp runs the same inputs through troupe's loss kinds
(troupe/loss.hpp, as the loss actor does: grad_scale = 1 / terms) and compares. Run once
and commit the output:

    /usr/bin/python3 tests/reference/make_loss_reference.py \
        > tests/reference/loss_reference.json

Inputs are float32; each case holds the mean loss (reduction="mean", as troupe reports it)
and d(mean loss)/d(input), printed with repr() of the float32 value widened to double.
"""
import json
import sys

import torch

torch.manual_seed(0)
ROWS, CLASSES = 6, 5
LOGITS = (torch.rand(ROWS, CLASSES, dtype=torch.float64) * 8 - 4).float()
LABELS = [0, 3, 4, 3, 1, 2]
PREDICTIONS = (torch.rand(ROWS, 3, dtype=torch.float64) * 4 - 2).float()
TARGETS = (torch.rand(ROWS, 3, dtype=torch.float64) * 4 - 2).float()
BINARY = [[1, 0, 1], [0, 0, 1], [1, 1, 1], [0, 1, 0], [1, 0, 0], [0, 0, 0]]

def values(tensor):
    return [float(v) for v in tensor.detach().flatten().tolist()]

def case(name, loss, settings, inputs, targets, compute):
    x = inputs.clone().requires_grad_(True)
    value = compute(x)
    value.backward()
    return {
        "name": name,
        "loss": loss,
        "settings": settings,
        "shape": list(inputs.shape),
        "input": values(inputs),
        "targets": targets,
        "mean_loss": float(value.item()),
        "gradient": values(x.grad),
    }

def main():
    F = torch.nn.functional
    labels = torch.tensor(LABELS)
    targets = TARGETS
    binary = torch.tensor(BINARY, dtype=torch.float32)
    cases = [
        case("cross_entropy", "softmax_xent", {}, LOGITS, LABELS,
             lambda x: F.cross_entropy(x, labels)),
        case("cross_entropy_label_smoothing", "softmax_xent", {"label_smoothing": 0.1},
             LOGITS, LABELS, lambda x: F.cross_entropy(x, labels, label_smoothing=0.1)),
        case("cross_entropy_ignore_index", "softmax_xent", {"ignore_index": 3}, LOGITS, LABELS,
             lambda x: F.cross_entropy(x, labels, ignore_index=3)),
        case("cross_entropy_both", "softmax_xent", {"label_smoothing": 0.2, "ignore_index": 3},
             LOGITS, LABELS,
             lambda x: F.cross_entropy(x, labels, ignore_index=3, label_smoothing=0.2)),
        case("mse", "mse", {}, PREDICTIONS, values(targets),
             lambda x: F.mse_loss(x, targets)),
        case("l1", "l1", {}, PREDICTIONS, values(targets), lambda x: F.l1_loss(x, targets)),
        case("huber", "huber", {}, PREDICTIONS, values(targets),
             lambda x: F.huber_loss(x, targets)),
        case("huber_delta", "huber", {"delta": 0.5}, PREDICTIONS, values(targets),
             lambda x: F.huber_loss(x, targets, delta=0.5)),
        case("bce_with_logits", "bce_with_logits", {}, PREDICTIONS * 2, values(binary),
             lambda x: F.binary_cross_entropy_with_logits(x, binary)),
    ]
    json.dump({"torch": torch.__version__, "cases": cases}, sys.stdout, indent=1)
    sys.stdout.write("\n")

main()
