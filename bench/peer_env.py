"""The environment PyTorch runs in for the benchmarks: its best on these machines.

One thread (OMP_NUM_THREADS=1: the comparisons are one core against one core), and glibc's
malloc told to keep what it frees (MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_).
PyTorch's CPU tensors come from malloc; a tensor of more than 32 MiB, or any once the heap's
top is trimmed, goes back to the system when freed and faults its pages in again when the
next step makes it anew. On the team's paravirtualised AMD VM (2026-12-06) that made Adam
(foreach=True) over a 6-layer 1024-wide MLP's 6.3 M parameters take 40-180 ms a step instead
of 15, and the whole step 5x slower; PyTorch's performance guide recommends a caching malloc
(jemalloc, tcmalloc) for this, and these two variables are glibc's own. troupe keeps its
tensors in a caching allocator of its own and needs neither. Imported by the scripts beside
it; it runs nothing.
"""
import os

# As large as glibc takes for each (the mmap threshold is capped at 32 MiB on 64-bit: every
# block up to it comes from the heap, and the heap is never trimmed).
KEEP_FREED = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 62)}


def pytorch_env(**more):
    """os.environ for a PyTorch process: one thread, freed memory kept, and `more`."""
    return dict(os.environ, OMP_NUM_THREADS="1", **KEEP_FREED, **more)
