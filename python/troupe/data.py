"""Data from Python for troupe.run, plan and verify: NumPy arrays, or batches from a callable.

    troupe.data.arrays(x_train, y_train, x_test, y_test)
    troupe.data.iterable(lambda epoch: loader, classes=10)   # e.g. a torch DataLoader

Arrays take the dtypes of [data] source = "npy" (uint8/16/32, int8/16/32/64, float16/32/64)
and are read in place, without a copy, when C-ordered and little-endian (else one C-ordered
copy is made first); they are normalised as [data] scale/mean/std/normalize say.
"""
from __future__ import annotations

import numpy as np

from . import _troupe

__all__ = ["arrays", "iterable"]


def _array(value, name):
    try:
        a = np.asarray(value)
    except Exception as e:  # noqa: BLE001 - any conversion failure is the caller's data
        raise _troupe.DataError(f"{name}: cannot be read as a NumPy array: {e}") from None
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return np.ascontiguousarray(a)


class _Given:
    def __init__(self, handle, description):
        self._handle = handle
        self._description = description

    def __repr__(self):
        return f"<troupe.data {self._description}>"


def arrays(x_train, y_train, x_test=None, y_test=None):
    """Training (and test) features and targets: x of shape (N, ...) (each sample flattened
    in C order), y of N class labels (integers) or (N, K) float targets, as the loss reads.
    Without a test split, evaluations use [data] validation's held-out share, or none run."""
    if (x_test is None) != (y_test is None):
        raise _troupe.DataError("arrays: give both x_test and y_test, or neither")
    x, y = _array(x_train, "x_train"), _array(y_train, "y_train")
    xt = yt = None
    if x_test is not None:
        xt, yt = _array(x_test, "x_test"), _array(y_test, "y_test")
    handle = _troupe.arrays_source(x, y, xt, yt)
    return _Given(handle, f"arrays x_train {x.shape} {x.dtype}")


def _to_numpy(value):
    if hasattr(value, "detach"):  # a torch tensor, without importing torch
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def _next_batch(iterator, epoch, index):
    """The iterator's next (features, labels), as float32 (B, D) and int32 (B, T) arrays."""
    try:
        got = next(iterator)
    except StopIteration:
        raise _troupe.DataError(
            f"the iterable of epoch {epoch} ended after {index} batch(es); troupe.data.iterable "
            "was told each epoch has more (steps_per_epoch)") from None
    if not isinstance(got, (tuple, list)) or len(got) < 2:
        raise _troupe.DataError(f"batch {index} of epoch {epoch} should be (features, targets), "
                                f"got {type(got).__name__}")
    x, y = _to_numpy(got[0]), _to_numpy(got[1])
    if x.ndim < 1 or y.ndim < 1:
        raise _troupe.DataError(f"batch {index} of epoch {epoch}: features and targets need a "
                                "batch axis")
    if not np.issubdtype(y.dtype, np.integer):
        raise _troupe.DataError(f"batch {index} of epoch {epoch}: targets of dtype {y.dtype}; "
                                "troupe.data.iterable reads integer class labels")
    x = np.ascontiguousarray(x.reshape(x.shape[0], -1), dtype=np.float32)
    y = np.ascontiguousarray(y.reshape(y.shape[0], -1), dtype=np.int32)
    return x, y


def iterable(fn, *, classes, steps_per_epoch=None, test=None):
    """Batches from Python: fn(epoch) returns an iterable of (features, labels) batches of
    the global batch (a torch DataLoader with drop_last=True, a generator), each the same
    size; the iterable's batch size becomes [data] batch_size. Batches are split across
    replicas as the loader splits its own, so every wiring trains on the same batches, in
    fn's order (troupe does not shuffle them). fn(epoch) must give the same batches each time
    it is called for an epoch (a resumed run calls it again). Labels are class ids in
    [0, classes). steps_per_epoch: batches an epoch (default len(fn(0))). test: (x_test,
    y_test) arrays to evaluate on after each epoch (else none, or [data] validation's)."""
    if not callable(fn):
        raise TypeError("iterable: fn should be callable as fn(epoch)")
    first_epoch = fn(0)
    if steps_per_epoch is None:
        try:
            steps_per_epoch = len(first_epoch)
        except TypeError:
            raise _troupe.DataError("iterable: fn(0) has no len(); give steps_per_epoch") from None
    if steps_per_epoch < 1:
        raise _troupe.DataError(f"iterable: steps_per_epoch is {steps_per_epoch}; need 1 or more")
    x, y = _next_batch(iter(first_epoch), 0, 0)
    del first_epoch
    xt = yt = None
    if test is not None:
        xt, yt = _array(test[0], "x_test"), _array(test[1], "y_test")
    handle = _troupe.iterable_source(fn, _next_batch, x.shape[0], x.shape[1], y.shape[1],
                                     int(classes), int(steps_per_epoch), xt, yt)
    return _Given(handle, f"iterable of {steps_per_epoch} batches of {x.shape[0]}")
