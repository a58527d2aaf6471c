#!/usr/bin/env python3
"""The large MLP's training step in PyTorch on the GPU, the reference for
bench/gpu_mlp_bench.cpp: 784-4096-4096-10, batch 4096, Adam (lr 1e-3), cross-entropy, FP32
and TF32 matmuls. Prints the median step time of --steps steps after --warmup steps.

scripts/gpu-check.sh runs it when PyTorch with CUDA is on the lent machine; exits 2 (and
says why) when it is not.

    /usr/bin/python3 bench/gpu_mlp_torch.py [--steps 50] [--warmup 10]
"""
import argparse
import statistics
import sys
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("skipped: no PyTorch here")
        return 2
    if not torch.cuda.is_available():
        print("skipped: PyTorch sees no CUDA device")
        return 2
    device = torch.device("cuda:0")
    batch = 4096
    print(f"{'math':6} {'torch step ms':>14}")
    for tf32 in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.manual_seed(1)
        model = torch.nn.Sequential(
            torch.nn.Linear(784, 4096), torch.nn.ReLU(),
            torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
            torch.nn.Linear(4096, 10)).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        x = torch.randn(batch, 784, device=device)
        y = torch.randint(0, 10, (batch,), device=device)
        times = []
        for i in range(args.warmup + args.steps):
            torch.cuda.synchronize()
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            loss.item()  # troupe reads each step's loss too
            torch.cuda.synchronize()
            if i >= args.warmup:
                times.append((time.perf_counter() - start) * 1e3)
        print(f"{'tf32' if tf32 else 'fp32':6} {statistics.median(times):14.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
