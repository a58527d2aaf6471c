# test_tools.py: plan, verify, simulate, load, predict and Trace from Python: each the CLI
# command's own function, returning data.
import json
import os
import subprocess

import numpy as np
import pytest

import troupe
from conftest import mlp_config


def two_devices(**more):
    cfg = mlp_config()
    cfg.update({"parallel.devices": ["cpu:0", "cpu:1"], **more})
    return cfg


def test_plan_gives_actors_devices_and_wires_as_data(data, cli, tmp_path):
    x, y, _, _ = data
    cfg = two_devices(**{"parallel.data": 2})
    plan = troupe.plan(cfg, data=troupe.data.arrays(x, y))
    assert plan.replicas == 2 and plan.devices == ["cpu:0", "cpu:1"]
    layers = [a for a in plan.actors if a["kind"] == "layer"]
    assert len(layers) == 6 and {a["replica"] for a in layers} == {0, 1}
    names = {a["name"] for a in plan.actors}
    assert all(w["source"] in names and w["target"] in names for w in plan.wires)
    assert plan.dot().startswith("digraph") and "r1.layer_2" in str(plan)
    # each replica's three small layers run as one actor ([run] fuse_layers)
    assert [g["members"] for g in plan.fused] == [
        [f"r{r}.layer_{i}" for i in range(3)] for r in range(2)]
    assert all(g["name"] in str(plan) for g in plan.fused)
    # the same table as `troupe plan` prints for the same config
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    cfg.update({"data.source": "npy", "data.features": str(tmp_path / "x.npy"),
                "data.targets": str(tmp_path / "y.npy"), "data.validation": 0.25})
    (tmp_path / "c.toml").write_text(cfg.to_toml())
    table = subprocess.run([cli, "plan", str(tmp_path / "c.toml")], capture_output=True,
                           text=True, check=True).stdout
    assert table == str(troupe.plan(cfg))


def test_verify_holds_a_pipeline_to_the_single_device_run(data):
    x, y, _, _ = data
    cfg = two_devices(**{"parallel.pipeline": 2, "parallel.microbatches": 4,
                         "parallel.schedule": "1f1b"})
    result = troupe.verify(cfg, data=troupe.data.arrays(x, y), steps=10)
    assert result["passed"] and result["worst"] <= 1e-5
    assert len(result["differences"]) == 4
    first = result["differences"][0]
    assert (first["layer"], first["type"], first["name"]) == (0, "linear", "weight")


def test_simulate_predicts_a_wiring_with_a_calibration_measured_once():
    cfg = troupe.Config.load(os.path.join(os.path.dirname(__file__), "..", "..", "config",
                                          "fashion_mlp_pp2_1f1b.toml"))
    costs = troupe.calibrate(cfg, repeats=3)
    assert "layers" in json.loads(costs.to_json())
    p = troupe.simulate(cfg, calibration=costs, steps=6)
    assert p["step_us"] > 0 and p["samples_per_s"] > 0 and p["stages"] == 2
    assert len(p["pipeline"]) == 2 and json.loads(p["trace"])["traceEvents"]


def test_predict_gives_the_models_outputs_for_arrays(data, tmp_path):
    x, y, xt, yt = data
    given = troupe.data.arrays(x, y)
    run = troupe.run(mlp_config(steps=60), data=given, checkpoint=tmp_path / "ckpt")
    run.wait()
    p = troupe.load(tmp_path / "ckpt")
    for name, value in run.parameters().items():
        assert np.array_equal(p[name], value)
    logits = troupe.predict(mlp_config(), tmp_path / "ckpt", xt, data=given)
    hidden = np.maximum(xt @ p["0.weight"].T + p["0.bias"], 0)
    expected = hidden @ p["2.weight"].T + p["2.bias"]
    assert logits.shape == (200, 4)
    # float32 sums in another order than NumPy's
    assert np.abs(logits - expected).max() <= 1e-4 * np.abs(expected).max()
    probabilities = troupe.predict(mlp_config(), tmp_path / "ckpt", xt, data=given, softmax=True)
    assert np.allclose(probabilities.sum(axis=1), 1, atol=1e-5)
    assert (probabilities.argmax(axis=1) == yt).mean() > 0.9


def test_a_trace_reads_back_as_summary_busy_times_and_critical_path(data, tmp_path):
    x, y, _, _ = data
    cfg = two_devices(**{"parallel.pipeline": 2, "parallel.microbatches": 2})
    run = troupe.run(cfg, data=troupe.data.arrays(x, y), steps=8, trace=tmp_path / "t.json")
    run.wait()
    trace = run.trace
    assert trace.path == str(tmp_path / "t.json")
    assert trace.busy and all(seconds >= 0 for seconds in trace.busy.values())
    assert any(name.endswith("layer_0") for name in trace.busy)
    assert trace.critical_path["steps"]
    assert "busy" in str(trace).lower()
    with pytest.raises(troupe.InputError):
        troupe.Trace(tmp_path / "missing.json")
