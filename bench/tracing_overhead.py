#!/usr/bin/python3
"""What tracing costs, measured side by side on config/fashion_mlp_pp2_1f1b.toml.

Three variants, alternated in each repetition so they see the same machine noise:
  build-notrace  troupe built with -DTROUPE_TRACE_CALLS=OFF (no tracing calls at all)
  off            the normal build, tracing off (the default)
  on             the normal build with --trace (every message, job and counter recorded)
Reports median samples/s and the cost of "off" against build-notrace and of "on" against
"off". Builds ./build-notrace first if it is missing.

    /usr/bin/python3 bench/tracing_overhead.py [--repeats 5] [--steps 400]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "config", "fashion_mlp_pp2_1f1b.toml")


def build_notrace():
    build = os.path.join(ROOT, "build-notrace")
    if not os.path.exists(os.path.join(build, "troupe")):
        subprocess.run(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                        "-DTROUPE_TRACE_CALLS=OFF", "-DTROUPE_BUILD_TESTS=OFF", "-DTROUPE_CUDA=OFF"],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", build, "--target", "troupe_cli"], check=True,
                       stdout=subprocess.DEVNULL)
    return os.path.join(build, "troupe")


def run(binary, steps, workdir, trace):
    metrics = os.path.join(workdir, "m.jsonl")
    command = [binary, "run", CONFIG, "--quiet", "--steps", str(steps), "--metrics", metrics]
    if trace:
        command += ["--trace", os.path.join(workdir, "t.json")]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    with open(metrics) as f:
        return [json.loads(line) for line in f if '"event"' in line][-1]["samples_per_s"]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    traced = os.path.join(ROOT, "build", "troupe")
    if not os.path.exists(traced):
        sys.exit("no ./build/troupe: run scripts/build.sh first")
    untraced = build_notrace()
    rates = {"build-notrace": [], "off": [], "on": []}
    with tempfile.TemporaryDirectory() as workdir:
        for r in range(args.repeats):
            rates["build-notrace"].append(run(untraced, args.steps, workdir, False))
            rates["off"].append(run(traced, args.steps, workdir, False))
            rates["on"].append(run(traced, args.steps, workdir, True))
            print(f"run {r + 1}: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in rates.items()),
                  file=sys.stderr)
    median = {k: statistics.median(v) for k, v in rates.items()}
    print(f"Tracing cost on fashion_mlp_pp2_1f1b.toml, {args.steps} steps, medians of "
          f"{args.repeats} (samples/s)")
    for k, v in median.items():
        print(f"  {k:>14} {v:>9.0f}")
    print(f"  off vs no tracing calls: {100 * (1 - median['off'] / median['build-notrace']):+.2f}% "
          f"cost (target <= 0.5%)")
    print(f"  on vs off:               {100 * (1 - median['on'] / median['off']):+.2f}% cost "
          f"(target <= 5%)")


if __name__ == "__main__":
    main()
