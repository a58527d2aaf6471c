#!/usr/bin/python3
"""Synchronous data parallelism next to local SGD, DiLoCo and an asynchronous parameter
server over two processes, with and without an emulated slow link (issue 50).

config/char_lm.toml's model (the two-block character transformer on Debian's fortunes,
AdamW, cosine schedule), 2 replicas on node0/cpu:0 and node1/cpu:0 (`troupe launch -n 2`),
the same steps and global batch for every mode, so the same samples:
  ring          synchronous: every step's gradients all-reduced by the actor ring
  local_sgd H   each replica steps on its own gradients; parameters averaged every H steps
  diloco H      likewise, each sync an outer Nesterov step (lr 0.7, momentum 0.9) on the
                replicas' mean parameter delta
  async S       a parameter server a layer (on node0) applies each replica's gradients as
                they arrive, at most S updates stale
each once with no link emulated and once over [cluster] link = "100 Mbit/s, 20 ms" (Note [an
emulated link] in runtime/net/link_model.cpp). One traced run per cell: the final test loss,
samples/s (the run's own, tracing on), and the bytes that crossed between the two processes
(the trace's network wires, tensors through shared memory included). With --simulate also `troupe simulate`'s
predicted samples/s for each cell, beside the measurement.

    /usr/bin/python3 bench/slow_links.py [--steps 600] [--modes ring,local_sgd:8,...]
                                         [--link "100 Mbit/s, 20 ms"] [--simulate]
                                         [--curves DIR] [--loader-capacity N]

Run from the repository root after scripts/build.sh, on an otherwise idle machine. Not
part of ctest.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = "ring,local_sgd:8,local_sgd:32,diloco:32,diloco:128,async:1,async:4"


def config_text(steps, mode, link):
    """char_lm.toml over two processes in `mode` ("ring", "local_sgd:8", "diloco:32",
    "async:4"),
    over `link` (or none)."""
    with open(os.path.join(ROOT, "config", "char_lm.toml")) as f:
        text = f.read()
    text = text[:text.index("[parallel]")]
    text = re.sub(r"^steps = \d+", f"steps = {steps}", text, flags=re.M)
    text = re.sub(r"^metrics = .*\n", "", text, flags=re.M)
    text = re.sub(r"^log_every = .*\n", "", text, flags=re.M)
    rule, _, every = mode.partition(":")
    parallel = '[parallel]\ndevices = ["node0/cpu:0", "node1/cpu:0"]\ndata = 2\n'
    parallel += f'averaging = "{rule}"\n'
    if every:
        parallel += f"{'max_staleness' if rule == 'async' else 'sync_every'} = {every}\n"
    cluster = "\n[cluster]\nnodes = 2\n" + (f'link = "{link}"\n' if link else "")
    return text + parallel + cluster


def loader_capacity(binary, text, workdir, capacity):
    """`text` ejected as an explicit config (`troupe plan --eject`) whose loader wires to the
    replicas' first layers hold `capacity` batches instead of the shorthand's (for a replica
    on another node than the loader 4, Note [a remote replica's batches] in
    runtime/graph/expand.cpp; 1 was the shorthand's before it, where each remote batch waited
    for a credit's round trip over the link)."""
    config = os.path.join(workdir, "shorthand.toml")
    with open(config, "w") as f:
        f.write(text)
    explicit = subprocess.run([binary, "plan", config, "--eject"], check=True,
                              capture_output=True, text=True).stdout
    changed, count = re.subn(r'(from = "loader"\nto = "r\d+\.layer_0"\nkind = "activations"\n'
                             r'capacity = )\d+\n', rf"\g<1>{capacity}\n", explicit)
    assert count == 2, count
    return changed


def launched(binary, text, workdir, metrics):
    """One traced `troupe launch -n 2` of `text`, its metrics to `metrics`: its final
    record, and the bytes between the processes."""
    config = os.path.join(workdir, "run.toml")
    trace = os.path.join(workdir, "run.json")
    with open(config, "w") as f:
        f.write(text)
    subprocess.run([binary, "launch", "-n", "2", config, "--quiet", "--metrics", metrics,
                    "--trace", trace], check=True, stdout=subprocess.DEVNULL)
    with open(metrics) as f:
        records = [json.loads(line) for line in f]
    final = [r for r in records if "event" in r][-1]
    final["test_loss"] = [r for r in records if "test_loss" in r][-1]["test_loss"]
    summary = json.loads(subprocess.run([binary, "trace", "summary", trace, "--json"],
                                        check=True, capture_output=True, text=True).stdout)
    # What each message to the other process carried, its tensors included (those that
    # went through shared memory too: summary's shared_memory_bytes is a part of this).
    final["bytes"] = sum(w["bytes"] for w in summary["wires"] if w["network"])
    return final


def predicted_rate(binary, text, workdir, batch):
    """`troupe simulate`'s samples/s for `text`."""
    config = os.path.join(workdir, "simulated.toml")
    with open(config, "w") as f:
        f.write(text)
    out = subprocess.run([binary, "simulate", config, "--steps", "140", "--repeats", "5"],
                         check=True, capture_output=True, text=True).stdout
    step_ms = float(re.search(r"predicted step: ([0-9.]+) ms", out).group(1))
    return batch / step_ms * 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", default=os.path.join(ROOT, "build", "troupe"))
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--modes", default=MODES)
    parser.add_argument("--link", default="100 Mbit/s, 20 ms")
    parser.add_argument("--simulate", action="store_true")
    parser.add_argument("--loader-capacity", type=int,
                        help="the loader's wires to the replicas' first layers hold this many "
                        "batches (an ejected config; without it the shorthand's)")
    parser.add_argument("--curves", help="keep each run's metrics in this directory and draw "
                        "the emulated link's loss against seconds of training there "
                        "(slow_link_curves.svg, troupe plot --x seconds)")
    args = parser.parse_args()
    if args.curves:
        os.makedirs(args.curves, exist_ok=True)
    batch = 32
    rows = []
    with tempfile.TemporaryDirectory(prefix="troupe-slow-links-") as workdir:
        for link in ("", args.link):
            for mode in args.modes.split(","):
                text = config_text(args.steps, mode, link)
                if args.loader_capacity:
                    text = loader_capacity(args.binary, text, workdir, args.loader_capacity)
                name = ("link-" if link else "none-") + mode.replace(":", "-")
                metrics = os.path.join(args.curves or workdir, name + ".jsonl")
                final = launched(args.binary, text, workdir, metrics)
                row = {"link": link or "none", "mode": mode, "loss": final["test_loss"],
                       "rate": final["samples_per_s"], "seconds": final["train_s"],
                       "bytes": final["bytes"]}
                if args.simulate:
                    row["predicted"] = predicted_rate(args.binary, text, workdir, batch)
                row["metrics"] = metrics
                rows.append(row)
                print(json.dumps(row), file=sys.stderr)
    if args.curves:
        linked = [r for r in rows if r["link"] != "none"]
        subprocess.run([args.binary, "plot", *(r["metrics"] for r in linked), "--x", "seconds",
                        "--labels", ",".join(r["mode"] for r in linked), "-o",
                        os.path.join(args.curves, "slow_link_curves.svg")], check=True)
    print(f"\nchar_lm, 2 processes, {args.steps} steps of batch {batch} (the same samples in "
          "every mode), the loader's wires to the replicas holding " +
          (f"{args.loader_capacity} batch(es)" if args.loader_capacity else "the shorthand's") +
          "; one traced run each")
    header = ("| link | mode | test loss | vs ring | train s | samples/s | vs ring | "
              "MiB between nodes | ring's / this |" + (" predicted samples/s |"
                                                      if args.simulate else ""))
    print(header)
    print("|" + " --- |" * (header.count("|") - 1))
    for row in rows:
        ring = next(r for r in rows if r["link"] == row["link"] and r["mode"] == "ring")
        cells = [row["link"], row["mode"], f'{row["loss"]:.4f}',
                 f'{row["loss"] / ring["loss"]:.3f}', f'{row["seconds"]:.1f}',
                 f'{row["rate"]:.0f}', f'{row["rate"] / ring["rate"]:.2f}x',
                 f'{row["bytes"] / 2**20:.1f}', f'{ring["bytes"] / max(row["bytes"], 1):.1f}x']
        if args.simulate:
            cells.append(f'{row["predicted"]:.0f} ({row["predicted"] / row["rate"]:.2f})')
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
