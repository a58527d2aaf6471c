#!/usr/bin/python3
"""bf16 mixed precision against fp32: troupe in both, PyTorch 1.13 in both, side by side.

The wide MLP of issue 46 (784-1024-1024-10, ReLU, Adam, batch 512) and the shipped
784-256-256-10 on random data, one thread each pinned to one core with taskset, medians of
--repeats runs alternating the four: troupe with [run] precision = "fp32" and "bf16", PyTorch
in fp32 and under torch.autocast("cpu", dtype=torch.bfloat16) (its mixed precision: the
linear layers in bf16, fp32 weights; foreach=True Adam, its fastest CPU one).

    OPENBLAS_CORETYPE=Haswell /usr/bin/python3 bench/precision.py [--repeats 3] [--core 1]

Needs a CPU with AVX512-BF16 or AMX (troupe refuses bf16 elsewhere). Run from the
repository root after scripts/build.sh. Not part of ctest.
"""
import argparse
import os
import statistics
import sys
import tempfile

from shapes import CLASSES, FEATURES, PYTORCH, ROOT, python_rate, troupe_rate

# shapes.py's PyTorch step, under autocast when its last argument says so.
PYTORCH_MIXED = PYTORCH.replace(
    "    loss = loss_fn(model(x), y)\n",
    "    with torch.autocast('cpu', dtype=torch.bfloat16, enabled=sys.argv[7] == 'bf16'):\n"
    "        loss = loss_fn(model(x), y)\n")
assert PYTORCH_MIXED != PYTORCH, "shapes.py's PyTorch script changed: update the replace"


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--core", type=int, default=0)
    parser.add_argument("--samples", type=int, default=30000)
    parser.add_argument("--binary", default=os.path.join(ROOT, "build", "troupe"))
    args = parser.parse_args()
    if not os.path.exists(args.binary):
        sys.exit(f"no troupe binary at {args.binary}: run scripts/build.sh first")
    models = [([1024, 1024], 512), ([256, 256], 512), ([256, 256], 128)]
    rows = []
    with tempfile.TemporaryDirectory() as workdir:
        for widths, batch in models:
            steps = max(30, args.samples // batch)
            rates = {key: [] for key in ("troupe fp32", "troupe bf16", "torch fp32", "torch bf16")}
            for _ in range(args.repeats):
                for precision in ("fp32", "bf16"):
                    rates[f"troupe {precision}"].append(troupe_rate(
                        args.binary, widths, "relu", batch, steps, args.core, workdir, "auto",
                        precision))
                    rates[f"torch {precision}"].append(python_rate(
                        PYTORCH_MIXED, [",".join(map(str, widths)), "relu", batch, steps,
                                        FEATURES, CLASSES, precision], args.core))
            medians = {key: statistics.median(v) for key, v in rates.items()}
            rows.append((widths, batch, medians))
            print(f"{widths} batch {batch}: " +
                  ", ".join(f"{k} {v:.0f}" for k, v in medians.items()), file=sys.stderr)
    print(f"\nMLP {FEATURES}-(hidden)-{CLASSES}, ReLU, Adam, one core (taskset -c {args.core}), "
          f"samples/s, medians of {args.repeats}")
    print("| hidden | batch | troupe fp32 | troupe bf16 | PyTorch fp32 | PyTorch autocast bf16 "
          "| troupe bf16 / fp32 | troupe bf16 / PyTorch autocast |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for widths, batch, m in rows:
        print(f"| {'-'.join(map(str, widths))} | {batch} | {m['troupe fp32']:.0f} | "
              f"{m['troupe bf16']:.0f} | {m['torch fp32']:.0f} | {m['torch bf16']:.0f} | "
              f"{m['troupe bf16'] / m['troupe fp32']:.2f}x | "
              f"{m['troupe bf16'] / m['torch bf16']:.2f}x |")


if __name__ == "__main__":
    main()
