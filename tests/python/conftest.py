# conftest.py: what the Python module's tests share: a small model's config, data it can
# learn, and the CLI built beside the module (ctest sets TROUPE_CLI, PYTHONPATH and the
# test plugins' paths; see CMakeLists.txt).
import os
import subprocess
import sys

import numpy as np
import pytest

import troupe

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def mlp_config(batch=32, steps=None, **sections):
    """A small MLP (20 -> 32 -> 4) on data of 20 features and 4 classes."""
    text = f"""
[run]
seed = 7
epochs = 2
watchdog = 60
evaluate = false

[data]
batch_size = {batch}
eval_batch_size = 100

[model]
loss = "softmax_xent"
[[model.layers]]
type = "linear"
out = 32
init = "kaiming"
[[model.layers]]
type = "relu"
[[model.layers]]
type = "linear"
out = 4
init = "xavier"

[optimizer]
type = "adam"
lr = 0.01
"""
    cfg = troupe.Config(text, "<test config>")
    if steps is not None:
        cfg["run.steps"] = steps
    for key, value in sections.items():
        cfg[key.replace("__", ".")] = value
    return cfg


def blobs(count=512, features=20, classes=4, seed=0):
    """Separable blobs: float32 features and int64 labels."""
    centres = np.random.default_rng(1234).normal(size=(classes, features)) * 3
    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, size=count)
    x = (centres[y] + rng.normal(size=(count, features))).astype(np.float32)
    return x, y


@pytest.fixture
def data():
    x, y = blobs()
    xt, yt = blobs(200, seed=1)
    return x, y, xt, yt


@pytest.fixture
def cli():
    path = os.environ.get("TROUPE_CLI", os.path.join(SOURCE, "build", "troupe"))
    if not os.path.exists(path):
        pytest.fail(f"the troupe command is not built at {path} (set TROUPE_CLI)")
    return path


def run_python(code, *args, timeout=120):
    """Runs `code` in a new /usr/bin/python3 (this interpreter), returning the process."""
    return subprocess.run([sys.executable, *args, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ))
