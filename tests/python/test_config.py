# test_config.py: troupe.Config reads, sets, checks and writes configs as the CLI does, and
# every error class of the module is raised where its exit code says.
import os

import numpy as np
import pytest

import troupe
from conftest import SOURCE, blobs, mlp_config


def test_a_shipped_config_loads_and_reads_back_its_keys():
    cfg = troupe.Config.load(os.path.join(SOURCE, "config", "fashion_mlp_dp2.toml"))
    assert cfg["parallel.data"] == 2
    assert cfg["data.batch_size"] == 128
    assert cfg.to_toml() == open(os.path.join(SOURCE, "config", "fashion_mlp_dp2.toml")).read()


def test_a_key_set_is_checked_and_round_trips_through_toml_and_a_dict():
    cfg = mlp_config()
    cfg["parallel.devices"] = ["cpu:0", "cpu:1"]
    cfg["parallel.data"] = 2
    cfg["optimizer.lr"] = 0.005
    cfg["run.metrics"] = "m.jsonl"
    assert cfg["parallel.data"] == 2 and cfg["optimizer.lr"] == 0.005
    again = troupe.Config(cfg.to_toml())
    assert again.to_dict() == cfg.to_dict()
    from_dict = troupe.Config.from_dict(cfg.to_dict())
    assert from_dict.to_dict() == cfg.to_dict()
    x, y = blobs()
    assert troupe.plan(from_dict, data=troupe.data.arrays(x, y)).replicas == 2


def test_a_wrong_value_raises_config_error_naming_the_key_and_leaves_the_config_as_it_was():
    cfg = mlp_config()
    before = cfg.to_toml()
    with pytest.raises(troupe.ConfigError) as error:
        cfg["parallel.data"] = "two"
    assert "parallel.data" in str(error.value) and "expected an integer" in str(error.value)
    assert cfg.to_toml() == before
    with pytest.raises(troupe.ConfigError, match="did you mean 'batch_size'"):
        cfg["data.batch_sise"] = 64
    with pytest.raises(troupe.ConfigError, match="SECTION.KEY"):
        cfg["epochs"] = 3
    with pytest.raises(troupe.ConfigError, match="no TOML form"):
        cfg["run.seed"] = object()


def test_from_dict_checks_like_a_file_and_plan_checks_the_model():
    with pytest.raises(troupe.ConfigError, match="did you mean 'adam'"):
        troupe.Config.from_dict({"optimizer": {"type": "adan"},
                                 "model": {"layers": [{"type": "linear", "out": 4}]}})
    cfg = troupe.Config.from_dict({"model": {"layers": [{"type": "linaer", "out": 4}]}})
    with pytest.raises(troupe.ConfigError, match="did you mean 'linear'"):
        troupe.plan(cfg)


def test_the_error_classes_carry_the_cli_exit_codes():
    assert issubclass(troupe.ConfigError, troupe.InputError)
    assert issubclass(troupe.DataError, troupe.InputError)
    assert issubclass(troupe.WatchdogError, troupe.RunError)
    assert issubclass(troupe.InputError, troupe.Error) and issubclass(troupe.RunError, troupe.Error)
    codes = {c.__name__: c.exit_code for c in (troupe.ConfigError, troupe.DataError,
                                               troupe.InputError, troupe.RunError,
                                               troupe.WatchdogError)}
    assert codes == {"ConfigError": 2, "DataError": 2, "InputError": 2, "RunError": 1,
                     "WatchdogError": 3}


def test_a_missing_file_raises_input_error(tmp_path):
    with pytest.raises(troupe.InputError, match="cannot"):
        troupe.Config.load(tmp_path / "missing.toml")


def test_data_that_does_not_fit_raises_data_error(data):
    x, y, _, _ = data
    with pytest.raises(troupe.DataError, match="not one troupe reads"):
        troupe.data.arrays(x.astype(np.complex64), y)
    with pytest.raises(troupe.DataError, match="512"):
        troupe.run(mlp_config(), data=troupe.data.arrays(x, y[:100])).wait()
    with pytest.raises(troupe.DataError, match="class labels"):
        troupe.run(mlp_config(), data=troupe.data.arrays(x, y - 5)).wait()


def test_a_dict_nested_too_deeply_or_a_huge_value_is_a_config_error_not_a_crash():
    deep = {"type": "adam"}
    for _ in range(100000):
        deep = {"x": deep}
    with pytest.raises(troupe.ConfigError, match="nested too deeply"):
        troupe.Config.from_dict({"optimizer": deep})
    with pytest.raises(troupe.ConfigError):  # toml's limits, checked before parsing
        troupe.Config.from_dict({"optimizer": {"type": "a" * (32 << 20)}})


def test_a_megabyte_key_or_value_comes_back_short_in_every_message():
    # Issue 48: every message that quotes user input quotes it short, Python's included.
    big = "k" * 1_000_000
    cfg = troupe.Config.load(os.path.join(SOURCE, "config", "fashion_mlp.toml"))
    attempts = [
        lambda: cfg.__setitem__("run." + big, 1),         # an unknown key, checked by C++
        lambda: cfg.__setitem__(big, 1),                  # not SECTION.KEY
        lambda: cfg["run." + big],                        # not set
        lambda: troupe.Config.from_dict({big: 1}),        # a section that is no dict
        lambda: cfg.__setitem__("model.init_from", "/no/" + big),  # a path too long
    ]
    for attempt in attempts:
        with pytest.raises((troupe.ConfigError, KeyError)) as error:
            attempt()
        assert len(str(error.value)) < 1000, str(error.value)[:300]


def test_a_long_value_set_from_python_is_named_as_python_sets_it():
    cfg = troupe.Config.load(os.path.join(SOURCE, "config", "fashion_mlp.toml"))
    with pytest.raises(troupe.ConfigError) as error:
        cfg["model.init_from"] = "/no/such/" + "w" * 100 + ".safetensors"
    assert str(error.value).startswith("cfg['model.init_from'] = \"/no/such/"), str(error.value)
