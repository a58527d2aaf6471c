# test_data.py: data from Python: NumPy arrays of every layout and dtype the npy source
# takes, and batches from a Python iterable (a torch DataLoader), the same batches on
# every wiring.
import numpy as np
import pytest

import troupe
from conftest import blobs, mlp_config


def parameters_after(cfg, given, **options):
    run = troupe.run(cfg, data=given, **options)
    assert run.wait()["event"] == "done"
    return run.parameters()


def assert_close(a, b, tolerance):
    assert sorted(a) == sorted(b)
    for name in a:
        scale = max(np.abs(a[name]).max(), 1e-30)
        assert np.abs(a[name] - b[name]).max() / scale <= tolerance, name


def test_arrays_of_any_layout_and_dtype_train_as_their_float32_c_order_copy(data):
    x, y, _, _ = data
    reference = parameters_after(mlp_config(steps=30), troupe.data.arrays(x, y))
    fortran = np.asfortranarray(x)
    assert not fortran.flags.c_contiguous
    assert_close(parameters_after(mlp_config(steps=30), troupe.data.arrays(fortran, y)),
                 reference, 0)
    big_endian = x.astype(">f4")
    assert_close(parameters_after(mlp_config(steps=30),
                                  troupe.data.arrays(big_endian, y.astype(np.uint8))),
                 reference, 0)
    as_double = x.astype(np.float64)  # converted to float32 as rows are gathered: exact
    assert_close(parameters_after(mlp_config(steps=30), troupe.data.arrays(as_double, y)),
                 reference, 0)


def test_arrays_are_read_in_place_not_copied(data):
    x, y, _, _ = data
    x = x.copy()
    given = troupe.data.arrays(x, y)
    before = parameters_after(mlp_config(steps=10), given)
    x *= 2  # the runtime reads the array's own memory
    after = parameters_after(mlp_config(steps=10), given)
    assert not np.array_equal(before["0.weight"], after["0.weight"])


def test_float_targets_train_a_regression_from_arrays():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(256, 20)).astype(np.float32)
    w = rng.normal(size=(20, 4))
    t = (x @ w).astype(np.float32)
    cfg = mlp_config(steps=200)
    cfg.update({"model.loss": "mse", "run.evaluate": True})
    run = troupe.run(cfg, data=troupe.data.arrays(x, t, x[:64], t[:64]))
    first = next(iter(run.metrics()))
    result = run.wait()
    assert result["test_rmse"] < 0.5 * np.sqrt(first["loss"])


def data_loader(x, y, batch):
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    dataset = TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    return lambda epoch: DataLoader(dataset, batch_size=batch, shuffle=False, drop_last=True)


def test_a_torch_data_loader_trains_as_the_same_arrays_in_order(data):
    x, y, xt, yt = data
    cfg = mlp_config()
    cfg["data.shuffle"] = False
    reference = parameters_after(cfg, troupe.data.arrays(x, y))
    fed = troupe.data.iterable(data_loader(x, y, 32), classes=4)
    assert_close(parameters_after(mlp_config(), fed), reference, 0)


@pytest.mark.parametrize("wiring", [
    {"parallel.devices": ["cpu:0", "cpu:1"], "parallel.data": 2},
    {"parallel.devices": ["cpu:0", "cpu:1"], "parallel.pipeline": 2, "parallel.microbatches": 4},
])
def test_an_iterable_gives_every_wiring_the_same_batches(data, wiring):
    x, y, _, _ = data
    fed = troupe.data.iterable(data_loader(x, y, 32), classes=4)
    single = parameters_after(mlp_config(), fed)
    cfg = mlp_config()
    cfg.update(wiring)
    # float summation order differs between wirings (DESIGN.md "Equivalence")
    assert_close(parameters_after(cfg, fed), single, 1e-5)


def test_an_iterable_evaluates_on_test_arrays_and_its_epochs_are_fn_of_epoch(data):
    x, y, xt, yt = data
    seen = []

    def batches(epoch):
        seen.append(epoch)
        order = np.random.default_rng(epoch).permutation(len(x))
        for start in range(0, len(x) - 31, 32):
            rows = order[start:start + 32]
            yield x[rows], y[rows]

    cfg = mlp_config()
    cfg["run.evaluate"] = True
    run = troupe.run(cfg, data=troupe.data.iterable(batches, classes=4, steps_per_epoch=16,
                                                   test=(xt, yt)))
    result = run.wait()
    assert result["steps"] == 32 and result["test_accuracy"] > 0.9
    assert set(seen) == {0, 1}


def test_an_iterable_that_breaks_its_promises_raises_data_error(data):
    x, y, _, _ = data
    short = troupe.data.iterable(lambda e: [(x[:32], y[:32]), (x[:16], y[:16])], classes=4)
    with pytest.raises(troupe.DataError, match="batch 1.*drop_last"):
        troupe.run(mlp_config(), data=short).wait()
    ended = troupe.data.iterable(lambda e: iter([(x[:32], y[:32])]), classes=4,
                                 steps_per_epoch=3)
    with pytest.raises(troupe.DataError, match="ended after 1 batch"):
        troupe.run(mlp_config(), data=ended).wait()
    held_out = mlp_config()
    held_out["data.validation"] = 0.1
    with pytest.raises(troupe.ConfigError, match="test=\\(x_test, y_test\\)"):
        troupe.run(held_out, data=troupe.data.iterable(lambda e: [(x[:32], y[:32])], classes=4))
    wrong = troupe.data.iterable(lambda e: [(x[:32], y[:32] + 4)], classes=4)
    with pytest.raises(troupe.DataError, match="classes are 0 .. 3"):
        troupe.run(mlp_config(), data=wrong).wait()

    def failing(epoch):
        yield x[:32], y[:32]
        raise ValueError("the user's loader failed")

    with pytest.raises(troupe.DataError, match="the user's loader failed"):
        troupe.run(mlp_config(), data=troupe.data.iterable(failing, classes=4,
                                                          steps_per_epoch=4)).wait()


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_batch_past_where_the_iterable_failed_fails_too_never_hangs(data, replicas):
    x, y, _, _ = data

    def breaks_at_2(epoch):
        for start in range(0, 64, 32):
            yield x[start:start + 32], y[start:start + 32]
        raise RuntimeError("the loader broke at batch 2")

    cfg = mlp_config()
    if replicas == 2:
        cfg.update({"parallel.devices": ["cpu:0", "cpu:1"], "parallel.data": 2})
    given = troupe.data.iterable(breaks_at_2, classes=4, steps_per_epoch=8)
    with pytest.raises(troupe.DataError, match="broke at batch 2"):
        troupe.run(cfg, data=given).wait(timeout=60)


def test_any_config_source_by_dict_of_data_keys(data, tmp_path):
    x, y, _, _ = data
    header = ",".join(f"x{i}" for i in range(x.shape[1])) + ",label"
    rows = np.column_stack([x, y]).astype(object)
    rows[:, -1] = y
    np.savetxt(tmp_path / "train.csv", rows, delimiter=",", header=header, comments="", fmt="%s")
    cfg = mlp_config(steps=200)
    cfg["run.evaluate"] = True
    table = {"source": "csv", "path": str(tmp_path / "train.csv"), "target": "label",
             "validation": 0.25}
    result = troupe.run(cfg, data=table).wait()
    assert result["test_accuracy"] > 0.9
    assert troupe.plan(cfg, data=table).replicas == 1
    with pytest.raises(troupe.ConfigError, match=r"cfg\['data.targett'\] = .*did you mean 'targets'"):
        troupe.run(cfg, data={**table, "targett": "label"})
    with pytest.raises(TypeError, match="dict of \\[data\\] keys"):
        troupe.run(cfg, data=[x, y])
