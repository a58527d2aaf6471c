#!/usr/bin/python3
"""What checkpoints cost a run, on the shipped MLP (config/fashion_mlp.toml, one device).

Two measurements, each side by side in one run of this script:
  pause     a traced run with a checkpoint every N steps: the device time of the checkpoint
            copy jobs (the only work a checkpoint puts on a device) per checkpoint, and
            averaged over all steps, against the mean step time of the same run;
  slowdown  train_s of runs with and without checkpoints (every N steps), alternated
            in each repetition so they see the same machine noise; the ratio of medians.
The files are written by the checkpoint writer's own thread, which competes with the
device threads for the machine's cores: the slowdown includes that, the pause does not.

    /usr/bin/python3 bench/checkpoint_pause.py [--repeats 5] [--steps 1000] [--every 100]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.abspath(os.path.dirname(__file__)))
CONFIG = os.path.join(ROOT, "config", "fashion_mlp.toml")
BINARY = os.path.join(ROOT, "build", "troupe")


def run(workdir, steps, every, trace=None):
    metrics = os.path.join(workdir, "m.jsonl")
    command = [BINARY, "run", CONFIG, "--quiet", "--steps", str(steps), "--metrics", metrics]
    if every:
        command += ["--checkpoint", os.path.join(workdir, "ck"), "--checkpoint-every", str(every)]
    if trace:
        command += ["--trace", trace]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    with open(metrics) as f:
        lines = [json.loads(line) for line in f]
    return [l for l in lines if l.get("event") == "done"][0]["train_s"]


def pause(workdir, steps, every):
    trace = os.path.join(workdir, "t.json")
    seconds = run(workdir, steps, every, trace)
    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    copies = [e["dur"] for e in events if e.get("ph") == "X" and e.get("name") == "checkpoint"]
    checkpoints = steps // every
    per_checkpoint_ms = sum(copies) / 1000.0 / checkpoints
    step_ms = seconds * 1000.0 / steps
    return per_checkpoint_ms, step_ms, len(copies)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--every", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        per_checkpoint, step, jobs = pause(workdir, args.steps, args.every)
        print(f"pause: {jobs} copy jobs, {per_checkpoint:.3f} ms of device time per checkpoint; "
              f"mean step {step:.3f} ms; averaged over steps at every {args.every}: "
              f"{100.0 * per_checkpoint / args.every / step:.3f}% of a step")
        plain, checkpointed = [], []
        for _ in range(args.repeats):
            for every, out in ((0, plain), (args.every, checkpointed)):
                with tempfile.TemporaryDirectory() as d:
                    out.append(run(d, args.steps, every))
        a, b = statistics.median(plain), statistics.median(checkpointed)
        print(f"slowdown: train_s median {a:.3f} s without, {b:.3f} s with a checkpoint "
              f"every {args.every} steps ({args.repeats} each, alternated): ratio {b / a:.3f}")


if __name__ == "__main__":
    main()
