#!/usr/bin/python3
"""Trains the character-level language model of config/char_lm.toml with troupe and with
PyTorch, side by side, and prints the ratio.

The same model (token + position embedding 64, two pre-norm blocks of causal 4-head
attention and an MLP of 256 with residual connections, layer_norm, linear to the
vocabulary), the same text (the fortunes package's files, every 10th fortune held out for
validation, byte tokens, windows of 64: runtime/data/text.hpp, re-implemented below), the
same batch and AdamW with troupe's warm-up and cosine schedule, one thread each, pinned to
the same core with taskset. Each repetition runs troupe and then PyTorch, so both see the
same machine noise; the table shows medians. Time is measured from the first training step
to the end of the last one (data loading excluded).

    /usr/bin/python3 bench/char_lm_vs_pytorch.py [--batches 32] [--repeats 3] [--core 0]
    /usr/bin/python3 bench/char_lm_vs_pytorch.py --curves DIR [--steps 2000]

--curves trains both for the config's steps instead (troupe with config/char_lm.toml as
shipped), each on its own core, writing the same JSON lines (DIR/troupe.jsonl,
DIR/pytorch.jsonl: training loss per step, validation loss at troupe's evaluations), prints
both final validation losses in bits per character, and draws DIR/curves.svg with
`troupe plot`.

Run from the repository root after scripts/build.sh. Not part of ctest.
"""
import os
import subprocess
import sys

from mlp_vs_pytorch import curves_arguments, plot_curves, ROOT, side_by_side
from peer_env import pytorch_env

CONFIG_FILE = os.path.join(ROOT, "config", "char_lm.toml")
TEXT = "/usr/share/games/fortunes"

# argv: batch, steps, then (for curves) the metrics path. The model, the data and the
# schedule of config/char_lm.toml.
PYTORCH = r"""
import json, math, os, sys, time, torch
torch.set_num_threads(1)
torch.manual_seed(1)
AUTOCAST = os.environ.get("TROUPE_BENCH_PRECISION") == "bf16"  # --precision bf16
batch, steps = int(sys.argv[1]), int(sys.argv[2])
out = sys.argv[4] if len(sys.argv) > 4 else None
T, D, H, F = 64, 64, 4, 256
path = "/usr/share/games/fortunes"
files = sorted(os.path.join(path, n) for n in os.listdir(path)
               if not n.startswith(".") and not n.endswith(".dat")
               and os.path.isfile(os.path.join(path, n))
               and not os.path.islink(os.path.join(path, n)))
records = []
for name in files:
    data = open(name, "rb").read()
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()  # as std::getline: no empty line after the last newline
    record = b""
    for line in lines:
        if line == b"%":
            if record:
                records.append(record)
            record = b""
        else:
            record += line + b"\n"
    if record:
        records.append(record)
train = b"".join(r for k, r in enumerate(records) if (k + 1) % 10 != 0)
valid = b"".join(r for k, r in enumerate(records) if (k + 1) % 10 == 0)
vocab = sorted(set(train) | set(valid))
index = {b: i for i, b in enumerate(vocab)}
def windows(text):
    ids = torch.tensor([index[b] for b in text], dtype=torch.long)
    n = (len(text) - 1) // T
    return ids[:n * T].view(n, T), ids[1:n * T + 1].view(n, T)
x_all, y_all = windows(train)
x_val, y_val = windows(valid)
V = len(vocab)
nn = torch.nn
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.attn = nn.MultiheadAttention(D, H, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(D, F), nn.GELU(), nn.Linear(F, D))
    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))
class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens = nn.Embedding(V, D)
        self.position = nn.Parameter(torch.randn(T, D))
        self.blocks = nn.ModuleList([Block(), Block()])
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, V)
        self.register_buffer("mask", torch.triu(torch.full((T, T), float("-inf")), 1))
    def forward(self, ids):
        x = self.tokens(ids) + self.position
        for block in self.blocks:
            x = block(x, self.mask)
        return self.head(self.ln(x))
model = LM()
lr, warmup, min_lr = 3e-3, 100, 3e-4
def factor(step):  # troupe's cosine schedule with linear warm-up, as a multiple of lr
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return (min_lr + (lr - min_lr) * 0.5 * (1 + math.cos(math.pi * progress))) / lr
opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, foreach=True)
schedule = torch.optim.lr_scheduler.LambdaLR(opt, factor)
loss_fn = nn.CrossEntropyLoss()
per_epoch = x_all.shape[0] // batch
def validate():
    model.eval()
    total = 0.0
    with torch.no_grad():
        for i in range(0, x_val.shape[0], 512):
            logits = model(x_val[i:i + 512])
            total += loss_fn(logits.reshape(-1, V), y_val[i:i + 512].reshape(-1)).item() * \
                logits.shape[0]
    model.train()
    return total / x_val.shape[0]
metrics = open(out, "w") if out else None
order = torch.randperm(x_all.shape[0])
start = time.perf_counter()
for step in range(steps):
    if step % per_epoch == 0 and step > 0:
        order = torch.randperm(x_all.shape[0])
    idx = order[(step % per_epoch) * batch:(step % per_epoch + 1) * batch]
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=AUTOCAST):
        loss = loss_fn(model(x_all[idx]).reshape(-1, V), y_all[idx].reshape(-1))
    loss.backward()
    opt.step()
    schedule.step()
    value = loss.item()  # what troupe reports per step
    if metrics:
        metrics.write(json.dumps({"epoch": step // per_epoch, "loss": value, "step": step}) + "\n")
        if (step + 1) % per_epoch == 0 or step + 1 == steps:
            valid_loss = validate()
            metrics.write(json.dumps({"epoch": step // per_epoch, "step": step + 1,
                                      "test_loss": valid_loss}) + "\n")
            print(f"step {step + 1}: validation loss {valid_loss:.4f} "
                  f"({valid_loss / math.log(2):.3f} bits per character)", flush=True)
elapsed = time.perf_counter() - start
print(steps * batch / elapsed)
"""


def troupe_config(batch, steps):
    """config/char_lm.toml with the bench's batch and steps, no evaluation or log."""
    with open(CONFIG_FILE) as f:
        text = f.read()
    text = text.replace("batch_size = 32", f"batch_size = {batch}", 1)
    text = text.replace("steps = 2000", f"steps = {steps}\nevaluate = false", 1)
    return text.replace("log_every = 100", "log_every = 1000000", 1)


def curves(directory, steps, binary):
    """Both trainings at once (each on its own core), then the picture."""
    os.makedirs(directory, exist_ok=True)
    mine, theirs = os.path.join(directory, "troupe.jsonl"), os.path.join(directory, "pytorch.jsonl")
    config = os.path.join(directory, "char_lm.toml")
    with open(CONFIG_FILE) as f:
        text = f.read().replace("steps = 2000", f"steps = {steps}", 1)
    with open(config, "w") as f:
        f.write(text)
    troupe = subprocess.Popen(["taskset", "-c", "0", binary, "run", config, "--metrics", mine],
                              stdout=subprocess.PIPE, text=True)
    subprocess.run(["taskset", "-c", "1", "/usr/bin/python3", "-c", PYTORCH, "32", str(steps),
                    TEXT, theirs], check=True, env=pytorch_env())
    output, _ = troupe.communicate()
    if troupe.returncode != 0:
        sys.exit("troupe run failed")
    print("troupe:\n" + output)
    plot_curves(binary, directory, mine, theirs)


def main():
    if "--curves" in sys.argv:
        args = curves_arguments(__doc__, "steps", 2000)
        curves(args.curves, args.steps, args.binary)
        return
    side_by_side(__doc__, "char-level transformer LM of config/char_lm.toml, AdamW",
                 troupe_config, PYTORCH, "32", 3200)


if __name__ == "__main__":
    main()
