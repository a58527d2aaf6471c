# test_run.py: troupe.run from Python: the same parameters as the CLI, metrics as they are
# made, a clean stop with a checkpoint that resumes, failures as exceptions, two runs at
# once on two threads, Ctrl-C, and python3 -X dev.
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import troupe
from conftest import blobs, mlp_config, run_python


def write_npy_config(tmp_path, x, y):
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    cfg = mlp_config()
    cfg.update({"data.source": "npy", "data.features": str(tmp_path / "x.npy"),
                "data.targets": str(tmp_path / "y.npy"), "data.validation": 0.25,
                "run.evaluate": True})
    path = tmp_path / "cli.toml"
    path.write_text(cfg.to_toml())
    return path


def test_a_run_from_arrays_equals_the_cli_run_from_npy_files_parameter_for_parameter(
        tmp_path, data, cli):
    x, y, _, _ = data
    path = write_npy_config(tmp_path, x, y)
    subprocess.run([cli, "run", str(path), "--quiet", "--metrics", "",
                    "--checkpoint", str(tmp_path / "ckpt")], check=True, timeout=120)
    from_cli = troupe.load(tmp_path / "ckpt")
    cfg = troupe.Config.load(path)
    run = troupe.run(cfg, data=troupe.data.arrays(x, y))
    result = run.wait()
    assert result["event"] == "done" and result["steps"] == 2 * 384 // 32
    assert "test_accuracy" in result  # the held-out quarter, as the CLI's
    ours = run.parameters()
    assert sorted(ours) == sorted(from_cli) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    for name in ours:
        assert ours[name].shape == from_cli[name].shape
        assert np.array_equal(ours[name], from_cli[name]), name


def test_metrics_arrive_while_the_run_goes_and_the_last_is_the_result(data):
    x, y, xt, yt = data
    cfg = mlp_config(steps=3000)
    cfg["run.evaluate"] = True
    run = troupe.run(cfg, data=troupe.data.arrays(x, y, xt, yt))
    records = []
    for record in run.metrics():
        if not records:
            assert not run.done, "the first record came only after the run ended"
        records.append(record)
    assert records[0]["step"] == 0 and "loss" in records[0] and "samples_per_s" in records[0]
    assert any("test_accuracy" in r for r in records)
    assert records[-1]["event"] == "done" and records[-1] == run.wait()
    assert run.wait()["test_accuracy"] > 0.9


def test_stop_leaves_a_checkpoint_that_resumes_to_the_uninterrupted_run(tmp_path, data):
    x, y, _, _ = data
    given = troupe.data.arrays(x, y)
    run = troupe.run(mlp_config(steps=1000000), data=given, checkpoint=tmp_path / "ckpt")
    for record in run.metrics():
        if record.get("step") == 5:
            run.stop()
    result = run.wait()
    assert result["event"] == "interrupted" and 5 <= result["steps"] < 1000000
    with pytest.raises(troupe.InputError, match="troupe.load"):
        run.parameters()
    stopped = troupe.load(tmp_path / "ckpt")
    assert sorted(stopped) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    total = result["steps"] + 40
    whole = troupe.run(mlp_config(steps=total), data=given)
    resumed = troupe.run(mlp_config(steps=total), data=given, resume=tmp_path / "ckpt")
    assert resumed.wait()["event"] == whole.wait()["event"] == "done"
    for name, value in whole.parameters().items():
        assert np.array_equal(resumed.parameters()[name], value), name


def test_a_failing_run_raises_run_error(data):
    plugin = os.environ.get("TROUPE_TEST_PLUGIN_FAULTY")
    if not plugin:
        pytest.fail("ctest sets TROUPE_TEST_PLUGIN_FAULTY to the faulty test plugin")
    x, y, _, _ = data
    cfg = mlp_config(steps=5)
    cfg["run.plugins"] = [plugin]
    text = cfg.to_toml().replace("type = 'relu'", "type = 'test_throwing_backward'")
    assert "test_throwing_backward" in text
    run = troupe.run(troupe.Config(text), data=troupe.data.arrays(x, y))
    with pytest.raises(troupe.RunError, match="test_throwing_backward|throw"):
        run.wait()


def test_a_watchdog_out_of_range_is_refused(data):
    x, y, _, _ = data
    for seconds in (-1, float("nan")):
        with pytest.raises(troupe.InputError, match="watchdog"):
            troupe.run(mlp_config(steps=5), data=troupe.data.arrays(x, y), watchdog=seconds)


def test_an_iterable_that_stalls_raises_watchdog_error(data):
    x, y, _, _ = data

    def slow(epoch):
        for start in range(0, 512, 32):
            if start == 64:
                time.sleep(3)
            yield x[start:start + 32], y[start:start + 32]

    run = troupe.run(mlp_config(steps=10), watchdog=1,
                     data=troupe.data.iterable(slow, classes=4, steps_per_epoch=16))
    with pytest.raises(troupe.WatchdogError):
        run.wait()


def test_two_runs_on_two_python_threads_at_once_both_finish(data):
    x, y, _, _ = data
    results = {}

    def train(device):
        cfg = mlp_config(steps=400)
        cfg["parallel.devices"] = [device]
        run = troupe.run(cfg, data=troupe.data.arrays(x, y))
        results[device] = (run.wait(), run.parameters())

    threads = [threading.Thread(target=train, args=(d,)) for d in ("cpu:0", "cpu:1")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert set(results) == {"cpu:0", "cpu:1"}
    (a, pa), (b, pb) = results["cpu:0"], results["cpu:1"]
    assert a["event"] == b["event"] == "done" and a["steps"] == b["steps"] == 400
    for name in pa:  # the same run on another device: the same numbers
        assert np.array_equal(pa[name], pb[name]), name


CTRL_C = """
import numpy as np, os, sys, troupe
sys.path.insert(0, {tests!r})
from conftest import blobs, mlp_config
x, y = blobs()
run = troupe.run(mlp_config(steps=100000), data=troupe.data.arrays(x, y), checkpoint={ckpt!r})
try:  # Ctrl-C while Python waits on the run: it stops cleanly, then KeyboardInterrupt
    records = run.metrics()
    for record in records:
        if record.get("step") == 3:
            print("training", flush=True)
            if {in_wait}:
                run.wait()
except KeyboardInterrupt:
    print("stopped", run.result["event"], run.result["steps"], flush=True)
"""


@pytest.mark.parametrize("in_wait", [False, True], ids=["in metrics()", "in wait()"])
def test_ctrl_c_stops_the_run_cleanly_with_its_checkpoint(tmp_path, in_wait):
    code = CTRL_C.format(tests=os.path.dirname(__file__), ckpt=str(tmp_path / "ckpt"),
                         in_wait=in_wait)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ))
    assert child.stdout.readline().strip() == "training"
    child.send_signal(signal.SIGINT)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 0
    words = out.split()
    assert words[:2] == ["stopped", "interrupted"] and 3 <= int(words[2]) < 100000
    assert troupe.load(tmp_path / "ckpt")["0.weight"].shape == (32, 20)


def test_the_module_imports_and_trains_under_python_dev_mode():
    code = ("import sys; sys.path.insert(0, %r)\n" % os.path.dirname(__file__) +
            "import troupe\nfrom conftest import blobs, mlp_config\n"
            "x, y = blobs()\nr = troupe.run(mlp_config(steps=20), data=troupe.data.arrays(x, y))\n"
            "print(r.wait()['event'], len(r.parameters()))\n")
    done = run_python(code, "-X", "dev", "-W", "error")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["done", "4"]


def test_a_run_whose_run_object_is_dropped_goes_on_to_its_end(tmp_path, data):
    x, y, _, _ = data
    troupe.run(mlp_config(steps=300), data=troupe.data.arrays(x, y), checkpoint=tmp_path / "c")
    import gc
    gc.collect()
    deadline = time.time() + 60
    from_checkpoint = None
    while from_checkpoint is None:  # the only checkpoint is the one at its end, step 300
        try:
            from_checkpoint = troupe.load(tmp_path / "c")
        except troupe.DataError:
            assert time.time() < deadline, "the dropped run never wrote its checkpoint"
            time.sleep(0.05)
    again = troupe.run(mlp_config(steps=300), data=troupe.data.arrays(x, y))
    for name, value in again.parameters().items():
        assert np.array_equal(from_checkpoint[name], value), name


def test_a_path_given_to_run_is_the_working_directory_s_a_config_s_its_file_s(
        tmp_path, data, monkeypatch):
    # Paths written in a config resolve against its folder; those given to a call (as on the
    # command line) against the working directory (docs/reference/config.md).
    x, y, _, _ = data
    configs, work = tmp_path / "configs", tmp_path / "work"
    configs.mkdir()
    work.mkdir()
    cfg = mlp_config(steps=2)
    cfg["run.trace"] = "own/t.json"
    (configs / "c.toml").write_text(cfg.to_toml())
    monkeypatch.chdir(work)
    loaded = troupe.Config.load(configs / "c.toml")
    troupe.run(loaded, data=troupe.data.arrays(x, y), checkpoint="ck", metrics="m.jsonl").wait()
    assert (configs / "own" / "t.json").exists()  # the config's own path
    assert (work / "ck").is_dir() and (work / "m.jsonl").exists()  # the call's
    assert not (configs / "ck").exists() and not (work / "own").exists()
