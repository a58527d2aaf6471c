"""troupe from Python: configure, run, watch and inspect training.

    import numpy as np, troupe
    cfg = troupe.Config.load("config/fashion_mlp.toml")
    cfg["run.epochs"] = 2
    run = troupe.run(cfg, data=troupe.data.arrays(x_train, y_train, x_test, y_test))
    for record in run.metrics():          # each step's and evaluation's record, as made
        print(record)
    result = run.wait()                   # the final record; raises troupe.RunError on failure
    weights = run.parameters()            # {"0.weight": ndarray, ...}: torch state_dict names

The runtime is troupe's C++ one (troupe._troupe): a run trains on threads of its own with
the GIL released, as fast as `troupe run`. Errors are exceptions under troupe.Error, one
class for each of the CLI's exit codes: ConfigError and DataError (both InputError, exit
code 2), RunError (1), WatchdogError (3). The API reference is docs/reference/python.md.
"""
from __future__ import annotations

import atexit
import json
import os
import re
import signal
import tempfile
import threading
import tomllib
import weakref

from . import _troupe
from . import data
from ._troupe import ConfigError, DataError, Error, InputError, RunError, WatchdogError

__all__ = [
    "Config", "Run", "Trace", "Calibration", "run", "plan", "verify", "calibrate", "simulate",
    "load", "predict", "data", "Error", "InputError", "ConfigError", "DataError", "RunError",
    "WatchdogError", "Plan",
]


def _toml_literal(value, key):
    """A Python value as a TOML value (bool, int, float, str, list, dict)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_literal(v, key) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_literal(v, key)}"
                               for k, v in value.items()) + "}"
    if hasattr(value, "item"):  # a NumPy scalar
        return _toml_literal(value.item(), key)
    raise ConfigError(f"{_short(key)}: a value of type {type(value).__name__} has no TOML form; "
                      "expected a bool, int, float, str, list or dict")


def _toml_of_dict(d):
    """A dict of sections ({"run": {...}, "model": {"layers": [{...}, ...]}}) as TOML text."""
    if not isinstance(d, dict):
        raise ConfigError(f"Config.from_dict takes a dict of sections, not {type(d).__name__}")
    lines = []
    for section, body in d.items():
        if isinstance(body, list) and body and all(isinstance(t, dict) for t in body):
            for table in body:  # [[actor]], [[wire]]
                lines.append(f"[[{json.dumps(str(section))}]]")
                lines += [f"{json.dumps(str(k))} = {_toml_literal(v, f'{section}.{k}')}"
                          for k, v in table.items()]
            continue
        if not isinstance(body, dict):
            raise ConfigError(f"Config.from_dict: section {_short(section)} should be a dict of "
                              f"keys, not {type(body).__name__}")
        lines.append(f"[{json.dumps(str(section))}]")  # quoted: any name is one key
        arrays = []
        for k, v in body.items():
            if isinstance(v, list) and v and all(isinstance(t, dict) for t in v):
                arrays.append((k, v))  # [[model.layers]] after the section's plain keys
            else:
                lines.append(f"{json.dumps(str(k))} = {_toml_literal(v, f'{section}.{k}')}")
        for k, tables in arrays:
            for table in tables:
                lines.append(f"[[{json.dumps(str(section))}.{json.dumps(str(k))}]]")
                lines += [f"{json.dumps(str(kk))} = {_toml_literal(vv, f'{section}.{k}.{kk}')}"
                          for kk, vv in table.items()]
    return "\n".join(lines) + "\n"


def _short(text, limit=80):
    """`text` quoted for a message, cut to `limit` characters with its length: no message
    echoes a megabyte key back (as the C++ side's quote_user_text)."""
    text = str(text)
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} characters)"


# "--set 'parallel.data=2':2:8: " or, cut by quote_user_text, "--set 'aaa...'... (N bytes):2:8: "
_SET_PREFIX = re.compile(r"^--set '(.*?)'((?:\.\.\. \(\d+ bytes\))?):\d+:\d+: ", re.DOTALL)


def _as_python_key(message):
    """The reader names a key set since as the CLI's --set does ("--set 'parallel.data=2':2:8:
    ..."); from Python it is cfg['parallel.data'] = 2."""
    match = _SET_PREFIX.match(message)
    if not match:
        return message
    key, _, value = match.group(1).partition("=")
    cut = "..." if match.group(2) else ""
    return f"cfg[{_short(key)}] = {value}{cut}: {message[match.end():]}"


class Config:
    """A topology config, checked as `troupe run` checks a file.

    Config.load("x.toml") or Config.from_dict({...}); cfg["parallel.data"] = 2 sets a key
    (SECTION.KEY) and checks the whole config again, raising ConfigError (naming the key,
    what was expected and what was found) and leaving the config as it was; cfg["run.seed"]
    reads one; cfg.to_toml() is the TOML text with every key set since.
    """

    def __init__(self, text, name="<config>", directory="."):
        self._text = text
        self._name = name
        self._directory = directory
        self._overrides = []
        self._check()

    @classmethod
    def load(cls, path):
        """Reads and checks a TOML config file; relative paths in it are read from its folder."""
        path = os.fspath(path)
        return cls(_troupe.read_config_file(path), path, _troupe.config_directory(path))

    @classmethod
    def from_dict(cls, sections, directory="."):
        """A config from {"section": {"key": value}}, with [[model.layers]] as lists of dicts."""
        try:
            text = _toml_of_dict(sections)
        except RecursionError:
            raise ConfigError("Config.from_dict: values nested too deeply to be a config") from None
        return cls(text, "<dict>", os.fspath(directory))

    def _source(self):
        return _troupe.ConfigSource(self._text, self._name, self._directory, list(self._overrides))

    def _check(self):
        _troupe.check_config(self._text, self._name, self._directory, self._overrides)

    def __setitem__(self, key, value):
        if not isinstance(key, str) or key.count(".") != 1:
            raise ConfigError(f"config keys are SECTION.KEY, e.g. 'parallel.data', not "
                              f"{_short(key)}")
        self.update({key: value})

    def update(self, values):
        """Sets several keys at once ({"data.source": "npy", "data.features": "x.npy"}) and
        checks the config once: keys that only make sense together. All or none are set."""
        added = [f"{key}={_toml_literal(value, key)}" for key, value in dict(values).items()]
        for key in dict(values):
            if not isinstance(key, str) or key.count(".") != 1:
                raise ConfigError(f"config keys are SECTION.KEY, e.g. 'parallel.data', not "
                                  f"{_short(key)}")
        if not added:
            return
        self._overrides += added
        try:
            self._check()
        except ConfigError as e:
            del self._overrides[-len(added):]
            raise ConfigError(_as_python_key(str(e))) from None
        except Error:
            del self._overrides[-len(added):]
            raise

    def __getitem__(self, key):
        node = self.to_dict()
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                raise KeyError(f"{_short(key)} is not set in this config (troupe's default "
                               "applies)")
            node = node[part]
        return node

    def to_toml(self):
        """The config as TOML text, the keys set since included."""
        if not self._overrides:
            return self._text
        return _troupe.config_text(self._text, self._name, self._overrides)

    def to_dict(self):
        """The config as nested dicts (the TOML of to_toml(), read by tomllib)."""
        return tomllib.loads(self.to_toml())

    def copy(self):
        """An independent copy: keys set on it leave this one as it was."""
        other = Config.__new__(Config)
        other.__dict__.update(self.__dict__)
        other._overrides = list(self._overrides)
        return other

    def __repr__(self):
        return f"<troupe.Config {self._name}" + (f" +{len(self._overrides)} set>" if self._overrides else ">")


def _config_of(cfg):
    if isinstance(cfg, Config):
        return cfg
    if isinstance(cfg, (str, os.PathLike)):
        return Config.load(cfg)
    if isinstance(cfg, dict):
        return Config.from_dict(cfg)
    raise TypeError(f"expected a troupe.Config, a TOML path or a dict, not {type(cfg).__name__}")


def _with_data(cfg, data):
    """(config, given data): a dict of [data] keys ({"source": "csv", "path": "t.csv",
    "target": "y"}: any source the config file can name) is set into a copy of the config,
    checked together; troupe.data's objects are handed over as they are."""
    cfg = _config_of(cfg)
    if isinstance(data, dict):
        cfg = cfg.copy()
        cfg.update({f"data.{key}": value for key, value in data.items()})
        return cfg, None
    if data is not None and not hasattr(data, "_handle"):
        raise TypeError("data= takes troupe.data.arrays(...), troupe.data.iterable(...), a dict "
                        f"of [data] keys or None, not {type(data).__name__}")
    return cfg, data


_runs = weakref.WeakSet()
_unfinished = set()
_previous_sigint = None


def _on_sigint(signum, frame):
    """Ctrl-C: every run of this process is asked to stop cleanly, then Python's own
    handler runs (KeyboardInterrupt, by default)."""
    for r in list(_runs):
        r.stop()
    if callable(_previous_sigint):
        _previous_sigint(signum, frame)
    elif _previous_sigint != signal.SIG_IGN:
        raise KeyboardInterrupt


def _watch_ctrl_c():
    """Puts _on_sigint before Python's SIGINT handler, once, from the main thread (the only
    one that may); a process that ignores SIGINT keeps ignoring it."""
    global _previous_sigint
    if threading.current_thread() is not threading.main_thread():
        return
    current = signal.getsignal(signal.SIGINT)
    if current is _on_sigint or current == signal.SIG_IGN:
        return
    _previous_sigint = current
    signal.signal(signal.SIGINT, _on_sigint)


@atexit.register
def _stop_runs_at_exit():
    for r in list(_runs):
        r.stop()
        r._handle.wait_for(1e9)


class Run:
    """A run training in the background (troupe.run returns one)."""

    def __init__(self, handle):
        self._handle = handle
        self._result = None
        _runs.add(self)

    def metrics(self, timeout=None):
        """Yields each record as the run makes it (the metrics file's JSON lines, as dicts)
        until the run ends; the last is the final one ({"event": "done", ...}). Ctrl-C
        while waiting for one stops the run cleanly, as in wait()."""
        try:
            yield from self._records(timeout)
        except KeyboardInterrupt:
            self._stop_and_wait()
            raise

    def _stop_and_wait(self):
        self.stop()
        while not self._handle.wait_for(0.1):
            pass

    def _records(self, timeout):
        while True:
            line = self._handle.next_record(0.1 if timeout is None else timeout)
            if line is not None:
                record = json.loads(line)
                if "event" in record and record["event"] != "checkpoint":
                    self._result = record
                yield record
            elif self._handle.finished():
                return
            elif timeout is not None:
                return

    def wait(self, timeout=None):
        """Waits for the end and returns the final record; raises the run's error
        (RunError, WatchdogError, DataError...). Ctrl-C while waiting stops the run cleanly
        (as SIGINT stops `troupe run`: the steps under way finish, a checkpoint is taken
        where checkpoints are on) and raises KeyboardInterrupt once it has stopped."""
        try:
            if timeout is None:
                while not self._handle.wait_for(0.1):
                    pass
            elif not self._handle.wait_for(timeout):
                raise TimeoutError(f"the run did not end within {timeout} s")
        except KeyboardInterrupt:
            self._stop_and_wait()
            raise
        return self.result

    def stop(self):
        """Asks the run to stop cleanly after the steps under way (and their checkpoint)."""
        self._handle.stop()

    @property
    def done(self):
        return self._handle.finished()

    @property
    def result(self):
        """The final record ({"event": "done"|"interrupted", "steps", ...}), waiting for
        the end; raises the run's error as wait() does."""
        while not self._handle.wait_for(0.1):
            pass
        code, failure = self._handle.outcome()
        for _ in self._records(timeout=0):  # records not yet read
            pass
        if code in (0, 130, 143):
            return self._result
        if code == 3:
            raise WatchdogError(failure)
        if code == 2:
            raise DataError(failure)
        raise RunError(failure)

    def parameters(self):
        """{name: numpy.ndarray} of the final parameters, named as the equivalent
        torch.nn.Sequential's state_dict ("0.weight", "0.bias", ...)."""
        self.wait()
        return self._handle.parameters()

    @property
    def trace(self):
        """The trace file written, as a troupe.Trace (None when none was asked for)."""
        self.wait()
        path = self._handle.trace_written()
        return Trace(path) if path else None


def run(cfg, data=None, *, trace=None, checkpoint=None, checkpoint_every=None, resume=None,
        steps=None, metrics="", progress=False, watchdog=None):
    """Starts training `cfg` in the background and returns a Run at once.

    data: troupe.data.arrays(...) or troupe.data.iterable(...), a dict of [data] keys
    ({"source": "csv", "path": "train.csv", "target": "y"}), or None for the config's
    [data]. trace: a Chrome trace file to write. checkpoint / checkpoint_every: as [run]
    checkpoint and checkpoint_every. resume: a checkpoint (or a directory of them) to go on
    from. steps: train this many steps. metrics: also write the JSON-lines file here ("":
    none; the records come through run.metrics()). progress: print progress lines as
    `troupe run` does. watchdog: seconds without progress before the run is stopped.
    """
    cfg, data = _with_data(cfg, data)
    cfg = cfg.copy()
    if steps is not None:
        cfg["run.steps"] = steps
    if checkpoint is not None:
        # A path given to a call is the working directory's, as on the command line (a
        # config's own are its file's: docs/reference/config.md).
        cfg["run.checkpoint"] = os.path.abspath(os.fspath(checkpoint))
    if checkpoint_every is not None:
        cfg["run.checkpoint_every"] = checkpoint_every
    settings = {"progress": bool(progress), "metrics": None if metrics is None else os.fspath(metrics),
                "trace": None if trace is None else os.fspath(trace), "watchdog": watchdog,
                "resume": None if resume is None else os.fspath(resume)}
    _watch_ctrl_c()
    started = Run(_troupe.start_run(cfg._source(), data, settings))
    # A run goes on until it ends even when its Run is dropped (`troupe.run(cfg)` alone in
    # a notebook cell): held here, and let go at a later run() once it has ended.
    _unfinished.difference_update({r for r in _unfinished if r._handle.finished()})
    _unfinished.add(started)
    return started


class Plan:
    """The actors, devices and wires a config expands into (troupe plan)."""

    def __init__(self, d):
        self.actors = d["actors"]        # [{"name", "kind", "device", "replica", "stage", "layer"}]
        self.wires = d["wires"]          # [{"source", "target", "kind", "capacity"}]
        self.fused = d["fused"]          # [{"name", "members"}]: layer actors run as one
        self.devices = d["devices"]
        self.replicas, self.stages = d["replicas"], d["stages"]
        self.microbatches, self.schedule = d["microbatches"], d["schedule"]
        self._table, self._dot, self._explicit = d["table"], d["dot"], d["explicit"]

    def dot(self):
        """Graphviz DOT text (troupe plan --dot)."""
        return self._dot

    def to_toml(self):
        """The explicit [[actor]]/[[wire]] config that runs identically (troupe plan --eject)."""
        return self._explicit

    def __str__(self):
        return self._table


def plan(cfg, data=None):
    """Checks cfg and returns its actor graph as a Plan; nothing runs."""
    cfg, data = _with_data(cfg, data)
    return Plan(_troupe.plan(cfg._source(), data))


def verify(cfg, data=None, *, steps=20, tolerance=None):
    """Trains cfg's wiring and its single-device form for `steps` steps and compares every
    parameter: {"passed", "worst", "tolerance", "differences": [{"layer", "parameter", "type",
    "name", "relative"}]} ("type" the layer's type, "name" the layer's name for the
    parameter). tolerance None: 1e-5, or 2^-8 for a config in [run] precision = "bf16"."""
    cfg, data = _with_data(cfg, data)
    return _troupe.verify(cfg._source(), data, steps, tolerance)


class Calibration:
    """Measured costs of a config's layers on this machine (troupe calibrate)."""

    def __init__(self, handle):
        self._handle = handle

    def to_json(self):
        return self._handle.to_json()

    def __str__(self):
        return str(self._handle)


def calibrate(cfg, *, repeats=20):
    """Times cfg's layers here: what troupe.simulate prices a wiring's jobs with."""
    return Calibration(_troupe.calibrate(_config_of(cfg)._source(), repeats))


def simulate(cfg, *, calibration=None, steps=20, cores=0, repeats=20):
    """Predicts cfg's wiring before it runs (troupe simulate): a dict with "step_us",
    "samples_per_s", "pipeline", "memory", ... and "trace" (the simulated trace's
    JSON text). `calibration` (troupe.calibrate of the same model) is measured when None."""
    cfg = _config_of(cfg)
    if calibration is None:
        calibration = calibrate(cfg, repeats=repeats)
    prediction, trace = _troupe.simulate(cfg._source(), calibration._handle, steps, cores)
    out = json.loads(prediction)
    out["trace"] = trace
    return out


def load(checkpoint):
    """{name: numpy.ndarray} of a checkpoint's parameters (a checkpoint directory, or a
    directory of them: its newest complete one), named as torch's state_dict."""
    parameters, _step, _path = _troupe.load_checkpoint(os.fspath(checkpoint))
    return parameters


def predict(cfg, checkpoint, inputs, *, data=None, softmax=False, batch=1000):
    """The model's outputs (logits, probabilities with softmax, or values) for `inputs`
    (an array of rows, or a path troupe predict reads), as a numpy.ndarray. Rows are
    normalised as the training data was: give `data` (what the model was trained on, e.g.
    troupe.data.arrays(...)) when that was not the config's own [data] source."""
    import numpy as np
    cfg, data = _with_data(cfg, data)
    with tempfile.TemporaryDirectory(prefix="troupe-predict-") as work:
        if isinstance(inputs, (str, os.PathLike)):
            path = os.fspath(inputs)
        else:
            path = os.path.join(work, "inputs.npy")
            np.save(path, np.ascontiguousarray(inputs))
        out = os.path.join(work, "outputs.npy")
        _troupe.predict(cfg._source(), data, os.fspath(checkpoint), path, out, softmax, batch)
        return np.load(out)


class Trace:
    """A trace file troupe wrote: its summary, critical path and busy times as data."""

    def __init__(self, path):
        self.path = os.fspath(path)
        summary, self._summary_text = _troupe.trace_summary(self.path)
        self.summary = json.loads(summary)
        self._explained = None

    def explain(self, step=-1):
        """Every step's critical path (or one step's), as `troupe trace explain --json`."""
        return json.loads(_troupe.trace_explain(self.path, step)[0])

    @property
    def critical_path(self):
        if self._explained is None:
            self._explained = self.explain()
        return self._explained

    @property
    def busy(self):
        """{actor: busy seconds}: its compute and message handling over the trace (the
        summary's "actors" list has each part, with waiting and idle time)."""
        return {a["name"]: (a["compute_us"] + a["handling_us"]) / 1e6
                for a in self.summary.get("actors", [])}

    def __str__(self):
        return self._summary_text
