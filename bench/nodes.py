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


def security(args, workdir):
    """The --security table (see the module's doc)."""
    tls_lines = "tls = true\n" + make_certificates(workdir)
    variants = [("door", args.binary, "")]
    if args.baseline:
        variants.insert(0, ("baseline", args.baseline, ""))
        variants.insert(1, ("baseline + TLS", args.baseline, tls_lines))
    variants.append(("door + TLS", args.binary, tls_lines))
    batch = int(args.batches.split(",")[0])
    rows = []
    for wiring, parallel in (("DP2", NODES), ("PP2 1F1B", PP2_NODES)):
        for path, transport in (("shared memory", ""), ("TCP", "shared_memory = false\n")):
            rates = {name: [] for name, _, _ in variants}
            for r in range(args.repeats):
                for name, binary, extra in variants:
                    text = MLP.format(steps=args.steps, batch=batch,
                                      parallel=parallel + transport + extra)
                    rates[name].append(run_launched(binary, text, workdir,
                                                    "security")["samples_per_s"])
                print(f"{wiring}, {path}, run {r + 1}: " +
                      ", ".join(f"{n} {v[-1]:.0f}" for n, v in rates.items()), file=sys.stderr)
            base = rates[variants[0][0]]
            rows.append((wiring, path, {n: (statistics.median(v), statistics.median(
                b / a for a, b in zip(base, v))) for n, v in rates.items()}))
    print(f"\nTwo processes, batch {batch}, {args.steps} steps, medians of {args.repeats} "
          f"(samples/s, and the ratio to {variants[0][0]} run by run)")
    print(f"{'wiring':>9} {'path':>14} " + " ".join(f"{n:>22}" for n, _, _ in variants))
    for wiring, path, cells in rows:
        print(f"{wiring:>9} {path:>14} " + " ".join(
            f"{cells[n][0]:>14.0f} ({cells[n][1]:.2f}x)" for n, _, _ in variants))


def main():
    def options(parser):
        parser.add_argument("--security", action="store_true",
                            help="what the front door and TLS cost (see above)")
        parser.add_argument("--baseline", help="a troupe binary from before the front door")
    args = main_arguments(__doc__, repeats=5, batches="128,256,512", extra=options)
    if args.security:
        with tempfile.TemporaryDirectory() as workdir:
            security(args, workdir)
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
