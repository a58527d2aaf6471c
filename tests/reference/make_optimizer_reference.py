#!/usr/bin/python3
"""Generates optimizer_reference.json: parameters after each of a few optimizer steps,
computed by PyTorch's own torch.optim.Adam / AdamW / SGD.

tests/kernels/optimizer_reference_test.cpp runs the same steps through troupe's
adam_update and sgd_update kernels and compares. Run once and commit the output:

    /usr/bin/python3 tests/reference/make_optimizer_reference.py \
        > tests/reference/optimizer_reference.json

Everything is float32 and uses the single-tensor code path (foreach=False), the one the
CPU kernels mirror. Numbers are printed with repr() of the float32 value widened to
double, so the C++ side reads them back exactly.
"""
import json
import re
import sys

import torch

INITIAL = [0.5, -1.25, 2.0, 0.0, -0.03125, 3.5, -2.75, 0.875]
GRADIENTS = [
    [0.1, -0.2, 0.3, -0.4, 0.5, -0.6, 0.7, -0.8],
    [-0.05, 0.25, 0.0, 1.5, -0.125, 0.2, -0.9, 0.33],
    [0.7, 0.7, -0.7, -0.7, 0.01, -0.01, 2.5, -3.0],
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [-1.0, 0.5, 0.125, -0.0625, 4.0, -4.0, 0.3, 0.6],
]

# name, optimizer class, constructor arguments (besides params)
CASES = [
    ("adam", torch.optim.Adam,
     dict(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)),
    ("adam_weight_decay", torch.optim.Adam,
     dict(lr=0.05, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    ("adamw", torch.optim.AdamW,
     dict(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)),
    ("adamw_strong_decay", torch.optim.AdamW,
     dict(lr=0.1, betas=(0.85, 0.995), eps=1e-7, weight_decay=0.5)),
    ("sgd_momentum_nesterov", torch.optim.SGD,
     dict(lr=0.05, momentum=0.9, dampening=0.0, nesterov=True, weight_decay=0.01)),
    ("sgd_momentum_dampening", torch.optim.SGD,
     dict(lr=0.1, momentum=0.8, dampening=0.3, nesterov=False, weight_decay=0.0)),
]


def as_list(tensor):
    return [float(x) for x in tensor.detach().tolist()]


def run_case(name, optimizer_class, arguments):
    param = torch.nn.Parameter(torch.tensor(INITIAL, dtype=torch.float32))
    optimizer = optimizer_class([param], foreach=False, **arguments)
    after = []
    for gradient in GRADIENTS:
        param.grad = torch.tensor(gradient, dtype=torch.float32)
        optimizer.step()
        after.append(as_list(param))
    hyper = dict(arguments)
    if "betas" in hyper:
        hyper["beta1"], hyper["beta2"] = hyper.pop("betas")
    return {
        "name": name,
        "optimizer": {torch.optim.Adam: "adam", torch.optim.AdamW: "adamw",
                      torch.optim.SGD: "sgd"}[optimizer_class],
        "hyper": hyper,
        "initial": as_list(torch.tensor(INITIAL, dtype=torch.float32)),
        "gradients": [as_list(torch.tensor(g, dtype=torch.float32)) for g in GRADIENTS],
        "params_after_step": after,
    }


def main():
    torch.manual_seed(0)
    document = {
        "generator": "tests/reference/make_optimizer_reference.py",
        "torch_version": torch.__version__,
        "cases": [run_case(*case) for case in CASES],
    }
    text = json.dumps(document, indent=1)
    # One line per vector of numbers, so the file reads (and diffs) step by step.
    text = re.sub(r"\[[-0-9.e,\s]*\]", lambda m: " ".join(m.group(0).split()), text)
    sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
