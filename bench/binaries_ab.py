#!/usr/bin/python3
"""Two troupe binaries on the same configs, alternated run by run: is the new one slower?

For a restructuring that must not cost speed: each round runs every config with binary A,
then with binary B, so both see the same machine noise; the table shows each one's median
samples/s and the ratio B / A. A config over several nodes runs under `troupe launch -n N`.

    /usr/bin/python3 bench/binaries_ab.py OLD/troupe NEW/troupe [--rounds 5] [--steps 300]
        [--batch 512] [--configs config/fashion_mlp.toml,config/fashion_mlp_dp2.toml,...]

Run from the repository root. Not part of ctest.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile

DEFAULT_CONFIGS = ["config/fashion_mlp.toml", "config/fashion_mlp_dp2.toml",
                   "config/fashion_mlp_dp2_2nodes.toml", "config/fashion_mlp_pp2_1f1b.toml"]


def nodes_of(config):
    with open(config) as f:
        m = re.search(r"^nodes\s*=\s*(\d+)", f.read(), re.M)
    return int(m.group(1)) if m else 1


def with_batch(config, batch, workdir):
    """`config` with [data] batch_size = batch (0: as it is), written into workdir. The
    shipped configs name their data by absolute path, so the copy reads the same data."""
    if not batch:
        return config
    with open(config) as f:
        text = f.read()
    text, count = re.subn(r"^batch_size\s*=\s*\d+", f"batch_size = {batch}", text, flags=re.M)
    if count != 1:
        raise SystemExit(f"{config}: no single batch_size line to set")
    path = os.path.join(workdir, os.path.basename(config))
    with open(path, "w") as f:
        f.write(text)
    return path


def samples_per_second(binary, config, steps, workdir):
    """One run's training samples/s, from its metrics' final record."""
    metrics = os.path.join(workdir, "metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    nodes = nodes_of(config)
    command = ([binary, "launch", "-n", str(nodes)] if nodes > 1 else [binary, "run"]) + [
        config, "--quiet", "--steps", str(steps), "--metrics", metrics]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr}")
    last = None
    with open(metrics) as f:
        for line in f:
            record = json.loads(line)
            if "samples_per_s" in record:
                last = record
    return last["samples_per_s"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("a", help="the old binary")
    parser.add_argument("b", help="the new binary")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=0, help="0: the config's batch")
    parser.add_argument("--configs", default=",".join(DEFAULT_CONFIGS))
    args = parser.parse_args()
    configs = args.configs.split(",")
    rates = {(c, w): [] for c in configs for w in "ab"}
    with tempfile.TemporaryDirectory() as workdir:
        runs = {c: with_batch(c, args.batch, workdir) for c in configs}
        for _ in range(args.rounds):
            for c in configs:
                for which, binary in (("a", args.a), ("b", args.b)):
                    rates[(c, which)].append(samples_per_second(binary, runs[c], args.steps,
                                                                workdir))
    batch = f"batch {args.batch}" if args.batch else "the configs' batches"
    print(f"{args.rounds} rounds of {args.steps} steps at {batch}, alternated; medians of "
          f"samples/s")
    print(f"{'config':<40} {'A':>10} {'B':>10} {'B / A':>7}  (B's rounds / A's, each)")
    for c in configs:
        a = statistics.median(rates[(c, "a")])
        b = statistics.median(rates[(c, "b")])
        each = " ".join(f"{y / x:.2f}" for x, y in zip(rates[(c, "a")], rates[(c, "b")]))
        print(f"{os.path.basename(c):<40} {a:>10.0f} {b:>10.0f} {b / a:>7.3f}  ({each})")


if __name__ == "__main__":
    main()
