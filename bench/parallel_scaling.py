#!/usr/bin/python3
"""Data-parallel scaling and the measured pipeline bubble, on this machine.

1. DP2 vs one device: the default MLP (784-256-256-10, Adam) on Fashion-MNIST with the
   same global batch, one device on one core (cpu:0, the whole process pinned to core 0
   with taskset) against two replicas (cpu:0, cpu:1, ring all-reduce), without and with
   the sharded optimizer. Runs alternate; medians of --repeats runs; the speed-up is the
   median of each repetition's ratio of samples/s. "halves" is what no wiring of two
   devices can beat by much: two one-device runs of half the batch at once, one pinned to
   each core, with nothing to average and nothing to wait for (each updates all of its
   parameters, where sharded DP2 updates half).
2. Pipeline bubble: a model of two halves (3 x linear 512 + ReLU each, the second with the
   10-way head) on synthetic data, P = 2 stages on cpu:0 and cpu:1, M = 1, 2, 4, 8
   micro-batches, GPipe, 1F1B, interleaved 1F1B (four stages, 2 a device: cpu:0 runs
   stages 0 and 2, which hold the same linear layers' worth as the first half; theory
   (P - 1) / (v M + P - 1), M = 2, 4, 8) and ZB-H1 (--schedules picks some). The measured
   bubble of a stage (of a device, interleaved) is its idle share of the training time,
   1 - busy / elapsed, from the device utilisation troupe reports (medians of untraced
   runs). "theory" is (P - 1) / (M + P - 1), for equal stages with no
   communication. The halves are not equal in work: the first layer computes no input
   gradient (half of a linear layer's backward), and the second half carries the head and
   the loss, so stage 0 does about 0.87-0.89 of stage 1's work. "costed" is the theory for the
   stages' measured work (`troupe trace summary` of one traced run: 1 - M work_s /
   (sum_s work_s + (M - 1) max_s work_s)); what is left above it is the pipeline's own cost.

    /usr/bin/python3 bench/parallel_scaling.py [--repeats 3] [--steps 300]

Run from the repository root after scripts/build.sh, on an otherwise idle machine. Not
part of ctest.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from config_text import RELU, linear, mlp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MLP = """
[run]
steps = {steps}
seed = 1
evaluate = false
[data]
source = "fashion-mnist"
batch_size = {batch}
""" + mlp([256, 256, 10]) + """[optimizer]
type = "adam"
lr = 1e-3
{parallel}
"""

DEEP = """
[run]
steps = {steps}
seed = 1
evaluate = false
[data]
source = "synthetic"
batch_size = {batch}
synthetic_train = 8192
synthetic_test = 16
synthetic_features = 512
synthetic_classes = 10
{layers}
""" + linear(10) + """[optimizer]
type = "sgd"
lr = 0.01
[parallel]
devices = ["cpu:0", "cpu:1"]
stages = {stages}
virtual_stages = {v}
microbatches = {m}
schedule = "{schedule}"
"""


def start(binary, text, workdir, name, cores=None, trace=False):
    """Starts troupe on `text` (on the CPUs `cores`, e.g. "0", if given); finish() waits."""
    config = os.path.join(workdir, name + ".toml")
    with open(config, "w") as f:
        f.write(text)
    pin = ["taskset", "-c", cores] if cores else []
    traced = ["--trace", os.path.join(workdir, name + ".trace.json")] if trace else []
    process = subprocess.Popen(pin + [binary, "run", config, "--quiet", "--metrics",
                                      os.path.join(workdir, name + ".jsonl")] + traced,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return process, binary, workdir, name, trace


def finish(started):
    """The final record of a run start() began, with its `troupe trace summary --json`
    under "summary" if traced."""
    process, binary, workdir, name, trace = started
    stderr = process.communicate()[1]
    if process.returncode != 0:  # its notes (e.g. devices sharing cores) only when it fails
        sys.exit(f"troupe run {os.path.join(workdir, name + '.toml')} failed with "
                 f"{process.returncode}:\n{stderr}")
    with open(os.path.join(workdir, name + ".jsonl")) as f:
        done = [json.loads(line) for line in f if '"event"' in line][-1]
    if trace:
        done["summary"] = json.loads(subprocess.run(
            [binary, "trace", "summary", os.path.join(workdir, name + ".trace.json"), "--json"],
            check=True, capture_output=True, text=True).stdout)
    return done


def run(binary, text, workdir, name, cores=None, trace=False):
    """Runs troupe on `text` (on the CPUs `cores`, e.g. "0", if given); its final record,
    and with `trace` also the run's `troupe trace summary --json` under "summary"."""
    return finish(start(binary, text, workdir, name, cores, trace))


def halves_rate(args, batch, workdir):
    """The reference for DP2 with nothing to average: two one-device runs of half the batch
    at once, one pinned to each core; their samples/s added. Each does the whole Adam
    update (sharded DP2 does half of it) and no all-reduce."""
    text = MLP.format(steps=args.steps, batch=batch // 2, parallel=SINGLE)
    started = [start(args.binary, text, workdir, f"half{core}", cores=str(core))
               for core in (0, 1)]
    return sum(finish(s)["samples_per_s"] for s in started)


def busy_spans(events, pid):
    """The union of the job and handler spans of the trace process `pid` (a device: its
    handlers run on its thread between its jobs), as sorted, disjoint (start, end) pairs."""
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("ph") == "X" and e.get("pid") == pid
                   and e.get("cat") in ("job", "handler"))
    merged = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def idle_within(spans, start, end):
    """How much of [start, end) the disjoint `spans` leave uncovered."""
    covered = sum(max(0, min(b, end) - max(a, start)) for a, b in spans if a < end and b > start)
    return end - start - covered


def dp_idle(args, batch, workdir):
    """Where a traced DP2 (sharded) run's devices wait, from its trace: the mean step (from
    one start of the first layer's forward, the later device's, to the next), the idle time
    in it of the device that waited least and of the other, and the busier device's idle
    between the end of its first layer's backward and its next forward (the wait that
    starting the ring on parts of that gradient would target). Idle is neither a job nor a
    handler on the device's thread."""
    run(args.binary, MLP.format(steps=args.steps, batch=batch, parallel=DP2_SHARDED), workdir,
        "dp_traced", trace=True)
    with open(os.path.join(workdir, "dp_traced.trace.json")) as f:
        events = json.load(f)["traceEvents"]
    devices = {e["pid"]: e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "process_name"
               and e["args"]["name"].startswith("cpu:")}
    first = {}  # (pid, name) -> {step: job} of the first layer's forward and backward
    for e in events:
        if (e.get("ph") == "X" and e.get("cat") == "job" and e["pid"] in devices
                and e["name"] in ("forward", "backward")
                and e["args"].get("actor", "").endswith("layer_0")):
            first.setdefault((e["pid"], e["name"]), {})[e["args"]["step"]] = e
    spans = {pid: busy_spans(events, pid) for pid in devices}
    steps = sorted(set.intersection(*(set(first[(pid, "forward")]) for pid in devices)))
    lengths, least, most, tails = [], [], [], []
    for step in steps[len(steps) // 10:-1]:  # the first tenth warms up
        start = max(first[(pid, "forward")][step]["ts"] for pid in devices)
        end = max(first[(pid, "forward")][step + 1]["ts"] for pid in devices)
        idle = {pid: idle_within(spans[pid], start, end) for pid in devices}
        busier = min(idle, key=idle.get)
        backward = first[(busier, "backward")][step]
        tails.append(idle_within(spans[busier], backward["ts"] + backward["dur"],
                                 first[(busier, "forward")][step + 1]["ts"]))
        lengths.append(end - start)
        least.append(idle[busier])
        most.append(max(idle.values()))
    step, waited = statistics.mean(lengths), statistics.mean(least)
    print(f"  traced DP2 sharded at batch {batch} ({args.steps} steps, means of steps "
          f"{len(steps) // 10}..{len(steps) - 2}): step {step:.0f} us; idle of the device "
          f"that waited least {waited:.0f} us ({waited / step:.1%}),"
          f" of the other {statistics.mean(most):.0f} us; of the former, between its first "
          f"layer's backward and next forward {statistics.mean(tails):.0f} us", flush=True)


# The [parallel] tables of the DP comparison: one device, two ring replicas, and two
# ring replicas with the sharded optimizer (as config/fashion_mlp_dp2.toml).
SINGLE = '[parallel]\ndevices = ["cpu:0"]\n'
DP2 = '[parallel]\ndevices = ["cpu:0", "cpu:1"]\ndata = 2\naveraging = "ring"\n'
DP2_SHARDED = DP2 + "shard_optimizer = true\n"


def main_arguments(doc, repeats, batches, extra=None):
    """The options both DP benchmarks take; checks that the troupe binary exists."""
    parser = argparse.ArgumentParser(description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batches", default=batches)
    parser.add_argument("--binary", default=os.path.join(ROOT, "build", "troupe"))
    if extra:
        extra(parser)
    args = parser.parse_args()
    if not os.path.exists(args.binary):
        sys.exit(f"no troupe binary at {args.binary}: run scripts/build.sh first")
    return args


def dp_runs(args, batch, workdir, wirings):
    """samples/s of the MLP on one device pinned to core 0, then with each [parallel] table
    of `wirings` (on both cores)."""
    rates = [run(args.binary, MLP.format(steps=args.steps, batch=batch, parallel=SINGLE),
                 workdir, "one", cores="0")["samples_per_s"]]
    for i, parallel in enumerate(wirings):
        rates.append(run(args.binary, MLP.format(steps=args.steps, batch=batch, parallel=parallel),
                         workdir, f"dp{i}")["samples_per_s"])
    return rates


def main():
    args = main_arguments(__doc__, repeats=3, batches="128,256,512,1024",
                          extra=lambda parser: (
                              parser.add_argument("--only", choices=["dp", "pipeline"],
                                                  help="run one part only"),
                              parser.add_argument("--idle", default="",
                                                  help="batches (e.g. 128) of a traced DP2 "
                                                       "run to find its devices' idle time in"),
                              parser.add_argument("--schedules",
                                                  default="gpipe,1f1b,interleaved,zb-h1",
                                                  help="the pipeline part's schedules")))
    with tempfile.TemporaryDirectory() as workdir:
        print("Data parallel: DP2 (cpu:0, cpu:1, ring) vs one device on one core, same global "
              f"batch, {args.steps} steps, medians of {args.repeats} (samples/s; speed-ups are "
              "medians of each run's ratio, with their range)")
        print("  halves: two one-device runs of half the batch at once, one a core, samples/s "
              "added (DP2 with nothing to average or wait for, and the whole Adam update in "
              "each); 'of halves': DP2 sharded's share of it, medians of each run's ratio")
        print(f"{'batch':>6} {'1 device':>9} {'DP2':>8} {'speed-up':>16} "
              f"{'DP2 sharded':>12} {'speed-up':>16} {'halves':>8} {'speed-up':>16} "
              f"{'of halves':>9}")
        for batch in [int(b) for b in args.batches.split(",")] if args.only != "pipeline" else []:
            runs = [dp_runs(args, batch, workdir, [DP2, DP2_SHARDED]) +
                    [halves_rate(args, batch, workdir)] for _ in range(args.repeats)]
            one, two, sharded, halves = ([r[i] for r in runs] for i in range(4))

            def speedup(rates):
                ratios = sorted(b / a for a, b in zip(one, rates))
                return (f"{statistics.median(ratios):.2f}x "
                        f"({ratios[0]:.2f}-{ratios[-1]:.2f})")
            share = statistics.median(b / a for a, b in zip(halves, sharded))
            print(f"{batch:>6} {statistics.median(one):>9.0f} {statistics.median(two):>8.0f} "
                  f"{speedup(two):>16} {statistics.median(sharded):>12.0f} "
                  f"{speedup(sharded):>16} {statistics.median(halves):>8.0f} "
                  f"{speedup(halves):>16} {share:>9.2f}", flush=True)
        idle_batches = args.idle.split(",") if args.idle and args.only != "pipeline" else []
        for batch in idle_batches:
            dp_idle(args, int(batch), workdir)
        if args.only == "dp":
            return

        layers = "".join(linear(512) + RELU for _ in range(6))
        print(f"\nPipeline bubble, P = 2 (two halves of a 512-wide MLP), batch 256, "
              f"{args.steps} steps, medians of {args.repeats}; costed: the theory for the "
              "stages' traced work")
        print(f"{'schedule':>11} {'M':>3} {'theory':>7} {'stage 0':>8} {'costed':>7} "
              f"{'stage 1':>8} {'costed':>7} {'samples/s':>10}")
        # Interleaved: quarters that give each device the halves' layers' worth (cpu:0 the
        # linear layers 0, 2 and 8, cpu:1 4, 6, 10 and the head).
        halves, quarters = "[[0, 5], [6, 12]]", "[[0, 3], [4, 7], [8, 9], [10, 12]]"
        for name, schedule, v, split in [("gpipe", "gpipe", 1, halves),
                                          ("1f1b", "1f1b", 1, halves),
                                          ("interleaved", "1f1b", 2, quarters),
                                          ("zb-h1", "zb-h1", 1, halves)]:
            if name not in args.schedules.split(","):
                continue
            for m in [1, 2, 4, 8] if v == 1 else [2, 4, 8]:  # M a multiple of P
                text = DEEP.format(steps=args.steps, batch=256, m=m, schedule=schedule,
                                   layers=layers, stages=split, v=v)
                bubbles0, bubbles1, rates = [], [], []
                for r in range(args.repeats):
                    done = run(args.binary, text, workdir, "pp")
                    bubbles0.append(1 - done["devices"]["cpu:0"]["utilisation"])
                    bubbles1.append(1 - done["devices"]["cpu:1"]["utilisation"])
                    rates.append(done["samples_per_s"])
                stages = run(args.binary, text, workdir, "pp_traced",
                             trace=True)["summary"]["pipeline"]["stages"]
                theory = 1 / ((3 * m if schedule == "zb-h1" else v * m) + 1)
                print(f"{name:>11} {m:>3} {theory:>7.3f} {statistics.median(bubbles0):>8.3f} "
                      f"{stages[0]['theory']:>7.3f} {statistics.median(bubbles1):>8.3f} "
                      f"{stages[1]['theory']:>7.3f} {statistics.median(rates):>10.0f}",
                      flush=True)


if __name__ == "__main__":
    main()
