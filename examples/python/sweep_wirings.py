#!/usr/bin/env python3
"""Predicts three wirings of one model with troupe.simulate, then trains the fastest.

The costs of the model's layers are measured once on this machine (troupe.calibrate); each
wiring is then simulated (its actors, credits and schedule played on virtual devices) in a
fraction of a second, so a script can sweep wirings before it spends time on one.

    PYTHONPATH=build/python python3 examples/python/sweep_wirings.py
"""
import numpy as np
from sklearn.datasets import load_digits

import troupe

digits = load_digits()
x = (digits.data / 16.0).astype(np.float32)
y = digits.target
data = troupe.data.arrays(x[:1400], y[:1400], x[1400:], y[1400:])

base = troupe.Config.from_dict({
    "run": {"epochs": 8, "seed": 1},
    "data": {"batch_size": 64, "eval_batch_size": 397},
    "model": {"loss": "softmax_xent",
              "layers": [{"type": "linear", "out": 256}, {"type": "relu"},
                         {"type": "linear", "out": 256}, {"type": "relu"},
                         {"type": "linear", "out": 10}]},
    "optimizer": {"type": "adam", "lr": 0.002},
    "parallel": {"devices": ["cpu:0", "cpu:1"], "share_devices": True},
})
wirings = {
    "one device": {},
    "two replicas": {"parallel.data": 2},
    "two pipeline stages, 1F1B": {"parallel.pipeline": 2, "parallel.microbatches": 4,
                                  "parallel.schedule": "1f1b"},
}
costs = troupe.calibrate(base, repeats=5)
predicted = {}
for name, keys in wirings.items():
    cfg = base.copy()
    cfg.update(keys)
    p = troupe.simulate(cfg, calibration=costs, steps=8)
    predicted[name] = (p["step_us"], cfg)
    print(f"{name:28s} {p['step_us']:8.0f} us a step, {p['samples_per_s']:9.0f} samples/s")

fastest = min(predicted, key=lambda name: predicted[name][0])
print(f"training the fastest: {fastest}")
result = troupe.run(predicted[fastest][1], data=data).wait()
print(f"{result['steps']} steps at {result['samples_per_s']:.0f} samples/s, "
      f"test accuracy {100 * result['test_accuracy']:.2f}%")
assert result["test_accuracy"] > 0.9
