#!/usr/bin/python3
"""DP2 across two processes next to DP2 in one process and PyTorch DDP, in one run.

The MLP of bench/parallel_scaling.py (784-256-256-10, ReLU, Adam lr 1e-3) on Fashion-MNIST,
same global batch everywhere, one core per replica:
  troupe, one process   DP2 on cpu:0 + cpu:1 (ring all-reduce, sharded optimizer)
  troupe, two processes DP2 on node0/cpu:0 + node1/cpu:0 (`troupe launch -n 2`: node0's
                        cpu:0 on core 0, node1's on core 1), the ring over loopback TCP;
                        and the same with averaging = "gloo" (unsharded)
  PyTorch DDP           2 processes (gloo, 1 thread each, pinned to core 0 and core 1)
Each repetition runs all three, alternating, so they share the machine's noise; the table
shows medians of samples/s and of the ratio two processes / one process. Then the speed
of one tensor between two troupe nodes (`troupe_link_bench`, built next to troupe), and
the time of one layer's gradient all-reduce between two nodes, the actor ring next to gloo
(`troupe_allreduce_bench`).

    /usr/bin/python3 bench/nodes.py [--batches 128,256,512] [--repeats 5] [--steps 300]

With --security (issue 53) it measures instead what node0's front door and TLS cost: DP2
and PP2 (1F1B, 4 micro-batches) over two processes, through shared memory and over TCP
([cluster] shared_memory = false), each with the default (the front door), with tls = true
(certificates made with the `openssl` command), and with --baseline OLD/troupe (a build
from before the door, where CAF accepted node0's connections itself) without and with TLS,
alternated run by run; the ratios are to the baseline, or to the default without one.

    /usr/bin/python3 bench/nodes.py --security [--baseline OLD/troupe] [--batches 256]

With --precision (issue 46) it measures the same four in [run] precision = "bf16" (DP2's
ring with reduce_dtype = "bf16" too) against fp32, and the bytes that crossed between the
two processes a step (one traced run each: the trace's network wires and shared memory).
Needs a CPU with AVX512-BF16 or AMX.

    OPENBLAS_CORETYPE=Haswell /usr/bin/python3 bench/nodes.py --precision [--batches 256]

Run from the repository root after scripts/build.sh, on an otherwise idle machine. Not
part of ctest.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dp_vs_ddp import run_torch  # noqa: E402
from parallel_scaling import DP2_SHARDED, MLP, main_arguments, run  # noqa: E402

NODES = ('[parallel]\ndevices = ["node0/cpu:0", "node1/cpu:0"]\ndata = 2\n'
         'averaging = "ring"\nshard_optimizer = true\n\n[cluster]\nnodes = 2\n')
NODES_GLOO = ('[parallel]\ndevices = ["node0/cpu:0", "node1/cpu:0"]\ndata = 2\n'
              'averaging = "gloo"\n\n[cluster]\nnodes = 2\nunauthenticated_gloo = true\n')


def run_launched(binary, text, workdir, name):
    """`troupe launch -n 2` on `text`; the coordinator's final record."""
    config = os.path.join(workdir, name + ".toml")
    metrics = os.path.join(workdir, name + ".jsonl")
    with open(config, "w") as f:
        f.write(text)
    subprocess.run([binary, "launch", "-n", "2", config, "--quiet", "--metrics", metrics],
                   check=True, stdout=subprocess.DEVNULL)
    with open(metrics) as f:
        return [json.loads(line) for line in f if '"event"' in line][-1]


PP2_NODES = ('[parallel]\ndevices = ["node0/cpu:0", "node1/cpu:0"]\npipeline = 2\n'
             'microbatches = 4\nschedule = "1f1b"\n\n[cluster]\nnodes = 2\n')


def make_certificates(workdir):
    """A CA and one node certificate it signs (EC P-256), as docs/guide/nodes.md makes them;
    the [cluster] lines that use them."""
    def openssl(*arguments):
        subprocess.run(["openssl", *arguments], cwd=workdir, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=troupe-bench-ca")
    openssl("req", *ec, "-keyout", "node.key", "-out", "node.csr", "-subj", "/CN=node")
    openssl("x509", "-req", "-in", "node.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "node.pem", "-days", "2")
    return "".join(f'{key} = "{os.path.join(workdir, name)}"\n'
                   for key, name in (("certificate", "node.pem"), ("key", "node.key"),
                                     ("ca_file", "ca.pem")))


def network_bytes(binary, text, workdir):
    """Bytes that crossed between the two processes in one traced run of `text`: over TCP
    (the trace's network wires) and through shared memory."""
    trace = os.path.join(workdir, "bytes.json")
    config = os.path.join(workdir, "bytes.toml")
    with open(config, "w") as f:
        f.write(text)
    subprocess.run([binary, "launch", "-n", "2", config, "--quiet", "--metrics", os.devnull,
                    "--trace", trace], check=True, stdout=subprocess.DEVNULL)
    summary = json.loads(subprocess.run([binary, "trace", "summary", trace, "--json"],
                                        check=True, capture_output=True, text=True).stdout)
    return (sum(w["bytes"] for w in summary["wires"] if w["network"]) +
            summary.get("shared_memory_bytes", 0))


def variant_table(args, workdir, variants, with_bytes=False):
    """DP2 and PP2 over two processes, through shared memory and over TCP, each variant
    (name, binary, text -> text) in turn run by run; a table of median samples/s and of the
    ratio to the first variant (and with `with_bytes` the bytes that crossed, per step)."""
    batch = int(args.batches.split(",")[0])
    rows = []
    for wiring, parallel in (("DP2", NODES), ("PP2 1F1B", PP2_NODES)):
        for path, transport in (("shared memory", ""), ("TCP", "shared_memory = false\n")):
            texts = {name: (binary, change(MLP.format(steps=args.steps, batch=batch,
                                                      parallel=parallel + transport)))
                     for name, binary, change in variants}
            rates = {name: [] for name in texts}
            for r in range(args.repeats):
                for name, (binary, text) in texts.items():
                    rates[name].append(run_launched(binary, text, workdir,
                                                    "variant")["samples_per_s"])
                print(f"{wiring}, {path}, run {r + 1}: " +
                      ", ".join(f"{n} {v[-1]:.0f}" for n, v in rates.items()), file=sys.stderr)
            base = rates[variants[0][0]]
            cells = {n: [statistics.median(v),
                         statistics.median(b / a for a, b in zip(base, v))]
                     for n, v in rates.items()}
            if with_bytes:
                for name, (binary, text) in texts.items():
                    cells[name].append(network_bytes(binary, text, workdir) / args.steps)
            rows.append((wiring, path, cells))
    print(f"\nTwo processes, batch {batch}, {args.steps} steps, medians of {args.repeats} "
          f"(samples/s, and the ratio to {variants[0][0]} run by run" +
          (", and KiB between the processes a step" if with_bytes else "") + ")")
    width = 32 if with_bytes else 22
    print(f"{'wiring':>9} {'path':>14} " + " ".join(f"{n:>{width}}" for n, _, _ in variants))
    for wiring, path, cells in rows:
        print(f"{wiring:>9} {path:>14} " + " ".join(
            f"{c[0]:>14.0f} ({c[1]:.2f}x)" + (f" {c[2] / 1024:>7.0f} KiB" if with_bytes else "")
            for c in (cells[n] for n, _, _ in variants)))


def security(args, workdir):
    """The --security table (see the module's doc)."""
    tls_lines = "tls = true\n" + make_certificates(workdir)

    def keep(text):
        return text

    def tls(text):
        return text.rstrip("\n") + "\n" + tls_lines
    variants = [("door", args.binary, keep)]
    if args.baseline:
        variants.insert(0, ("baseline", args.baseline, keep))
        variants.insert(1, ("baseline + TLS", args.baseline, tls))
    variants.append(("door + TLS", args.binary, tls))
    variant_table(args, workdir, variants)


def precision(args, workdir):
    """The --precision table (see the module's doc)."""
    def bf16(text):
        text = text.replace("[run]\n", '[run]\nprecision = "bf16"\n', 1)
        if "data = 2" in text:  # the gradients' ring in bf16 too
            text = text.replace("\n[cluster]\n", 'reduce_dtype = "bf16"\n\n[cluster]\n', 1)
        return text
    variant_table(args, workdir, [("fp32", args.binary, lambda text: text),
                                  ("bf16", args.binary, bf16)], with_bytes=True)


def main():
    def options(parser):
        parser.add_argument("--security", action="store_true",
                            help="what the front door and TLS cost (see above)")
        parser.add_argument("--baseline", help="a troupe binary from before the front door")
        parser.add_argument("--precision", action="store_true",
                            help="bf16 against fp32 over two processes (see above)")
    args = main_arguments(__doc__, repeats=5, batches="128,256,512", extra=options)
    if args.security or args.precision:
        with tempfile.TemporaryDirectory() as workdir:
            (security if args.security else precision)(args, workdir)
        return
    port = 29600 + os.getpid() % 1000
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for batch in [int(b) for b in args.batches.split(",")]:
            one, two, gloo, ddp = [], [], [], []
            for r in range(args.repeats):
                one.append(run(args.binary, MLP.format(steps=args.steps, batch=batch,
                                                       parallel=DP2_SHARDED),
                               workdir, "in-process")["samples_per_s"])
                two.append(run_launched(args.binary, MLP.format(steps=args.steps, batch=batch,
                                                                parallel=NODES),
                                        workdir, "two-processes")["samples_per_s"])
                gloo.append(run_launched(args.binary, MLP.format(steps=args.steps, batch=batch,
                                                                 parallel=NODES_GLOO),
                                         workdir, "two-processes-gloo")["samples_per_s"])
                ddp.append(run_torch(batch, args.steps, 2, port))
                port += 1
                print(f"batch {batch} run {r + 1}: one process {one[-1]:.0f}, two processes "
                      f"{two[-1]:.0f} (gloo {gloo[-1]:.0f}), DDP {ddp[-1]:.0f} samples/s",
                      file=sys.stderr)
            rows.append((batch, statistics.median(one), statistics.median(two),
                         statistics.median(b / a for a, b in zip(one, two)),
                         statistics.median(gloo), statistics.median(ddp)))
    print(f"\nDP2, one core per replica, same global batch, {args.steps} steps, medians of "
          f"{args.repeats} (samples/s)")
    print(f"{'batch':>6} {'1 process':>10} {'2 processes':>12} {'ratio':>7} {'2 proc. gloo':>13} "
          f"{'torch DDP':>10}")
    for batch, a, b, ratio, g, d in rows:
        print(f"{batch:>6} {a:>10.0f} {b:>12.0f} {ratio:>6.2f}x {g:>13.0f} {d:>10.0f}")

    link = os.path.join(os.path.dirname(args.binary), "troupe_link_bench")
    if os.path.exists(link):
        print("\nOne tensor between two troupe nodes over loopback (median of 9 rounds)")
        subprocess.run([link], check=True)
    else:
        print(f"\n(no {link}: build it with scripts/build.sh)")
    allreduce = os.path.join(os.path.dirname(args.binary), "troupe_allreduce_bench")
    if os.path.exists(allreduce):
        print("\nOne layer's gradients all-reduced between two troupe nodes over loopback, "
              "the actor ring vs gloo (median of 15 rounds)")
        subprocess.run([allreduce, "1", "16"], check=True)
    else:
        print(f"\n(no {allreduce}: build it with scripts/build.sh)")


if __name__ == "__main__":
    main()
