#!/usr/bin/python3
"""Pipeline schedules on fixed-cost layers: the measured bubble of every stage next to theory.

Each stage is two `delay` layers (actors/layers/delay.cpp) that sleep a set time, 2 ms
forward and 4 ms backward (split for ZB-H1 into 2 ms input gradient and 2 ms weight
gradient), so that stages are equal by construction and P = 4 stages on cpu:0..cpu:3 can
share this machine's two cores without slowing each other (a sleeping device leaves its
core to the others). For P = 2 and 4, GPipe, 1F1B, interleaved 1F1B (virtual_stages = 2:
the same 2 P layers as 2 P stages of one layer, stage s on device s mod P) and ZB-H1,
M = 4 and 8: the bubble of device d's stage(s) is its idle share of each training step
(from the step's first job to its last, on any device: 1 - the device's
forward/backward/weight-gradient/loss time / the step's span), the median over the steps
after the first (which includes start-up), from a trace of the run; then the median of
--repeats runs.

The model starts with a relu (microseconds), so that every delay layer computes an input
gradient: under ZB-H1 a first layer computes none (nobody needs it), and stage 0 would
have a third less backward work than the others. Theory is (P - 1) / (M + P - 1),
interleaved's (P - 1) / (v M + P - 1) and ZB-H1's (P - 1) / (3 M + P - 1). "costed" is
the trace summary's theory for the stages' measured work
(runtime/trace_tools/summary.hpp). "worst" is the largest |measured - costed| over the stages: what the
schedule and its hand-overs cost (a message and a thread wake-up per hand-over, and each
device's handling of its actors' messages between jobs).

    /usr/bin/python3 bench/pipeline_schedules.py [--repeats 3] [--steps 12] [--forward-us 2000]
        [--only zb-h1 ...] [--pipelines 2 ...]

Run from the repository root after scripts/build.sh, on an otherwise idle machine. Not
part of ctest.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

from config_text import RELU
from parallel_scaling import run as run_troupe

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CONFIG = """
[run]
steps = {steps}
seed = 1
evaluate = false
[data]
source = "synthetic"
batch_size = 64
synthetic_train = 1024
synthetic_test = 16
synthetic_features = 4
synthetic_classes = 4
{layers}[optimizer]
type = "sgd"
lr = 0.01
[parallel]
devices = [{devices}]
pipeline = {p}
virtual_stages = {v}
microbatches = {m}
schedule = "{schedule}"
"""

DELAY = '[[model.layers]]\ntype = "delay"\nforward_us = {forward_us}\n'

MICRO_BATCH_WORK = {"forward", "backward", "backward_weight", "loss"}


def step_bubbles(trace):
    """{step: {stage pid: idle share of the step's span}} from a trace's training jobs, but
    the relu's: it has no parameters to wait for, so it may start the next step's first
    forwards (microseconds each) while this step drains, which would stretch that step's
    span by the drain without changing the schedule."""
    jobs = {}
    for e in trace["traceEvents"]:
        args = e.get("args", {})
        if (e.get("ph") == "X" and e.get("cat") == "job" and e["name"] in MICRO_BATCH_WORK
                and args.get("phase") == "train" and "step" in args
                and args.get("actor") != "layer_0"):
            jobs.setdefault(args["step"], {}).setdefault(e["pid"], []).append(
                (e["ts"], e["ts"] + e["dur"]))
    out = {}
    for step, stages in jobs.items():
        first = min(start for spans in stages.values() for start, _ in spans)
        last = max(end for spans in stages.values() for _, end in spans)
        out[step] = {pid: 1 - sum(end - start for start, end in spans) / (last - first)
                     for pid, spans in stages.items()}
    return out


def run(binary, text, workdir):
    """Runs troupe on `text` with a trace: (samples/s, per-stage median bubbles by pid,
    per-stage costed theory)."""
    done = run_troupe(binary, text, workdir, "pp", trace=True)
    with open(os.path.join(workdir, "pp.trace.json")) as f:
        bubbles = step_bubbles(json.load(f))
    steps = sorted(bubbles)[1:]  # the first step includes start-up
    pids = sorted(bubbles[steps[0]])
    costed = [stage["theory"] for stage in done["summary"]["pipeline"]["stages"]]
    return (done["samples_per_s"],
            [statistics.median(bubbles[s][pid] for s in steps) for pid in pids], costed)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--forward-us", type=int, default=2000)
    parser.add_argument("--binary", default=os.path.join(ROOT, "build", "troupe"))
    parser.add_argument("--only", nargs="*", default=None,
                        help="these schedules only (gpipe, 1f1b, interl., zb-h1)")
    parser.add_argument("--pipelines", nargs="*", type=int, default=[2, 4],
                        help="the P to run (default 2 and 4)")
    args = parser.parse_args()
    if not os.path.exists(args.binary):
        sys.exit(f"no troupe binary at {args.binary}: run scripts/build.sh first")
    print(f"Pipeline bubble per stage, equal stages of 2 delay layers ({args.forward_us} us "
          f"forward, {2 * args.forward_us} us backward each), median over steps 1..{args.steps - 1}, "
          f"medians of {args.repeats} runs")
    print(f"{'P':>2} {'schedule':>8} {'M':>3} {'theory':>7}  {'measured, stages 0..P-1':<28} "
          f"{'costed, stages 0..P-1':<28} {'worst':>6} {'samples/s':>10}")
    with tempfile.TemporaryDirectory() as workdir:
        for p in args.pipelines:
            devices = ", ".join(f'"cpu:{d}"' for d in range(p))
            layers = RELU + DELAY.format(forward_us=args.forward_us) * (2 * p)
            for name, schedule, v in [("gpipe", "gpipe", 1), ("1f1b", "1f1b", 1),
                                      ("interl.", "1f1b", 2), ("zb-h1", "zb-h1", 1)]:
                if args.only is not None and name not in args.only:
                    continue
                for m in [4, 8]:
                    text = CONFIG.format(steps=args.steps, layers=layers, devices=devices, p=p,
                                         v=v, m=m, schedule=schedule)
                    runs = [run(args.binary, text, workdir) for _ in range(args.repeats)]
                    rate = statistics.median(r[0] for r in runs)
                    bubbles = [statistics.median(r[1][s] for r in runs) for s in range(p)]
                    costed = [statistics.median(r[2][s] for r in runs) for s in range(p)]
                    theory = (p - 1) / ((3 * m if schedule == "zb-h1" else v * m) + p - 1)
                    measured = " ".join(f"{b:.3f}" for b in bubbles)
                    expected = " ".join(f"{c:.3f}" for c in costed)
                    worst = max(abs(b - c) for b, c in zip(bubbles, costed))
                    print(f"{p:>2} {name:>8} {m:>3} {theory:>7.3f}  {measured:<28} "
                          f"{expected:<28} {worst:>6.3f} {rate:>10.0f}", flush=True)

if __name__ == "__main__":
    main()
