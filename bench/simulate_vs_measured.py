#!/usr/bin/python3
"""simulate_vs_measured.py: troupe simulate's predicted step time next to the measured one.

For each shipped config, side by side in one run: `troupe run CONFIG --steps N --trace T`
(several-node configs under `troupe launch`, processes of this machine), its step time read from the trace as troupe
simulate reads a simulated one (the trimmed mean time between the steps' last jobs),
and `troupe simulate CONFIG --steps N --cores C --json` (which times the config's layers
here first). --repeats rounds over all the configs (each round measures and predicts
every config once, so that each config's runs spread over the whole benchmark); medians
of the rounds, and the range of each round's own ratio. The ratio is predicted / measured. Then, with --scale, predictions for data parallelism of the MLP over
8, 64 and 512 devices (8 a node, the link given), batch 64 a replica.

    /usr/bin/python3 bench/simulate_vs_measured.py [--repeats 3] [--steps 60] [--scale]

Run from the repository root after scripts/build.sh. Benchmarks are not tests: this is
how the tables of docs/benchmarks.md ("Prediction") were made.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

TROUPE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "troupe")


def troupe(*args):
    out = subprocess.run([TROUPE, *args], capture_output=True, text=True, errors="replace")
    if out.returncode != 0:
        sys.exit(f"troupe {' '.join(args)} failed ({out.returncode}):\n{out.stdout}{out.stderr}")
    return out.stdout


def nodes_of(config):
    with open(config) as f:
        m = re.search(r"^nodes\s*=\s*(\d+)", f.read(), re.M)
    return int(m.group(1)) if m else 1


def step_ms(trace):
    """The mean time between the training steps' last jobs after step 0, without the
    slowest and fastest tenth, in ms: what troupe simulate and trace summary report
    (Note [step time] in runtime/trace_tools/steps.hpp)."""
    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    ends = {}
    for e in events:
        args = e.get("args", {})
        if e.get("ph") == "X" and e.get("cat") == "job" and args.get("phase", "train") == "train":
            step = args.get("step", -1)
            if step >= 0:
                ends[step] = max(ends.get(step, 0), e["ts"] + e["dur"])
    steps = sorted(ends)
    periods = sorted((ends[b] - ends[a]) / (b - a) for a, b in zip(steps, steps[1:]))
    cut = len(periods) // 10
    kept = periods[cut:len(periods) - cut]
    return sum(kept) / len(kept) / 1000


def peak_bytes(metrics):
    """The most bytes any device held at once, from the run's last metrics record (the
    coordinator's devices only, in a several-node run)."""
    with open(metrics) as f:
        done = [json.loads(line) for line in f if '"event"' in line][-1]
    return max(d["peak_bytes"] for d in done["devices"].values())


def without_evaluation(config, directory):
    """A copy of the config that does not evaluate: a simulation runs training steps only,
    and an evaluation's batches would be in the measured peak memory."""
    with open(config) as f:
        text = f.read()
    copy = os.path.join(directory, os.path.basename(config))
    with open(copy, "w") as f:
        f.write(re.sub(r"^\[run\]$", "[run]\nevaluate = false", text, count=1, flags=re.M))
    return copy


def measure(config, steps, directory):
    config = without_evaluation(config, directory)
    trace = os.path.join(directory, "run.json")
    metrics = os.path.join(directory, "metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    nodes = nodes_of(config)
    common = [config, "--steps", str(steps), "--trace", trace, "--quiet", "--metrics", metrics]
    if nodes > 1:
        troupe("launch", "-n", str(nodes), *common)
    else:
        troupe("run", *common)
    return step_ms(trace), peak_bytes(metrics)


def predict(config, steps, cores, link, extra=()):
    args = ["simulate", config, "--steps", str(steps), "--json", "--cores", str(cores), *extra]
    if link:
        args += ["--link", link]
    return json.loads(troupe(*args))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 2,
                        help="the cores this machine's devices share (troupe simulate --cores)")
    parser.add_argument("--link", default=None,
                        help="price the processes of a several-node config as machines apart "
                        "over this link (troupe simulate --link); default: as processes of this "
                        "machine, which they are (troupe calibrate measures what a message "
                        "between two of them costs)")
    parser.add_argument("--configs", nargs="*", default=None)
    parser.add_argument("--scale", action="store_true",
                        help="also predict DP over 8, 64, 512 devices")
    parser.add_argument("--scale-link", default="25 GB/s, 5 us")
    args = parser.parse_args()
    configs = args.configs if args.configs is not None else sorted(
        os.path.join("config", c) for c in os.listdir("config") if c.endswith(".toml"))
    # troupe simulate models CPU devices only: the GPU configs are left out, and said so.
    gpu_configs = [c for c in configs if '"cuda:' in open(c).read()]
    if gpu_configs:
        print("left out (GPU devices, which simulate does not model): " + ", ".join(gpu_configs))
        configs = [c for c in configs if c not in gpu_configs]
    # Rounds over the configs, not one config's repetitions in a row: this VM's speed moves in
    # phases of minutes (a DP2 step 1.05 ms and 1.45 ms a quarter of an hour apart), and a
    # config measured only within one phase would take that phase for its median.
    runs = {config: [] for config in configs}
    with tempfile.TemporaryDirectory() as directory:
        for _ in range(args.repeats):
            for config in configs:
                step, peak = measure(config, args.steps, directory)
                link = args.link if nodes_of(config) > 1 else None
                p = predict(config, args.steps, args.cores, link)
                # the coordinator's devices, as measured
                predicted_peak = max(d["peak_bytes"] for d in p["memory"]
                                     if not d["device"].startswith("node")
                                     or d["device"].startswith("node0/"))
                runs[config].append((step, p["step_us"] / 1000, peak, predicted_peak))
    if configs:
        print("| config | measured step (ms) | predicted (ms) | predicted / measured "
              "| each round's ratio | measured peak memory (MiB) | predicted (MiB) "
              "| predicted / measured |")
        print("|---|---|---|---|---|---|---|---|")
    for config in configs:
        rows = runs[config]
        m = statistics.median(r[0] for r in rows)
        p = statistics.median(r[1] for r in rows)
        ratios = sorted(r[1] / r[0] for r in rows)
        mb = statistics.median(r[2] for r in rows) / 2**20
        pb = statistics.median(r[3] for r in rows) / 2**20
        print(f"| {os.path.basename(config)} | {m:.3f} | {p:.3f} | {p / m:.2f} "
              f"| {ratios[0]:.2f}-{ratios[-1]:.2f} | {mb:.2f} | {pb:.2f} | {pb / mb:.2f} |",
              flush=True)
    if not args.scale:
        return
    print()
    print(f"| devices (8 a node, link {args.scale_link}) | averaging | batch | predicted step (ms) "
          f"| samples/s | simulated in (s) |")
    print("|---|---|---|---|---|---|")
    # A ring over 512 replicas is 2 x 511 x 512 chunk jobs a layer a step (5.3 million jobs
    # in 3 steps with the layers' own): about 3.5 minutes and 10 GB here.
    for devices, averaging in ((8, "ring"), (64, "ring"), (64, "central"), (512, "ring"),
                               (512, "central")):
        nodes = max(1, devices // 8)
        names = ", ".join(f'"node{n}/cpu:{i}"' for n in range(nodes) for i in range(min(8, devices)))
        sets = ["--set", f"parallel.data={devices}", "--set", f"parallel.devices=[{names}]",
                "--set", f"data.batch_size={64 * devices}", "--set", f"cluster.nodes={nodes}",
                "--set", f'parallel.averaging="{averaging}"']
        p = predict("config/fashion_mlp.toml", 3, 0, args.scale_link, sets)
        print(f"| {devices} on {nodes} node(s) | {averaging} | {64 * devices} "
              f"| {p['step_us'] / 1000:.3f} | {p['samples_per_s']:.0f} "
              f"| {p['wall_s']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
