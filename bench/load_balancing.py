#!/usr/bin/python3
"""The load-balancing samplers against the distributed sampler, side by side.

    /usr/bin/python3 bench/load_balancing.py [--samples 4000] [--epochs 2] [--rounds 2]

Writes a skewed JSONL data set (9 in 10 sequences of 8-32 tokens, 1 in 10
of 256-512) and exports a TorchScript model whose cost grows with sequence
length (an embedding, two 1-D convolutions over the sequence, a masked
mean, a linear classifier), then trains it with `bagua run` on 2 workers
(gradient_allreduce, 1 thread each) three ways:

  distributed     the distributed sampler, batches of 32 samples
  load_balancing  the load-balancing sampler, batches of 32 samples
  token budget    load_balancing with batch_complexity: batches of up to
                  --batch-max samples within a padded-token budget equal to
                  32 x the mean length (the same tokens per batch on average
                  as the two above)

Prints, for each, the median over --rounds of training samples/s (all
workers, from metrics.jsonl, the first log window left out) and the padding
share (metrics.jsonl's `padding`: input elements that were padding), and
the ratios against the distributed sampler. Build bagua first
(scripts/build.sh).
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

import torch
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BAGUA = os.path.join(ROOT, "build", "cli", "bagua")
VOCAB = 512


class ConvOverTokens(nn.Module):
    """Cost linear in the sequence length: two convolutions over every position."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 64, padding_idx=0)
        self.conv1 = nn.Conv1d(64, 128, 5, padding=2)
        self.conv2 = nn.Conv1d(128, 128, 5, padding=2)
        self.out = nn.Linear(128, 10)

    def forward(self, tokens):
        mask = (tokens != 0).unsqueeze(1).to(torch.float32)
        x = self.embed(tokens).transpose(1, 2)
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x)) * mask
        pooled = x.sum(2) / mask.sum(2).clamp(min=1.0)
        return self.out(pooled)


def write_data(path, samples, seed):
    rng = random.Random(seed)
    lengths = []
    with open(path, "w") as f:
        for _ in range(samples):
            n = rng.randint(256, 512) if rng.random() < 0.1 else rng.randint(8, 32)
            tokens = [rng.randint(1, VOCAB - 1) for _ in range(n)]
            label = sum(tokens[:4]) % 10
            f.write(json.dumps({"tokens": tokens, "label": label}) + "\n")
            lengths.append(n)
    return lengths


def run(work, name, sampler, epochs, batch):
    out = os.path.join(work, name)
    recipe = os.path.join(work, name + ".yaml")
    with open(recipe, "w") as f:
        f.write(f"""name: {name}
model: {{torchscript: {work}/model.pt, loss: cross_entropy}}
data:
  train: {{format: jsonl, path: {work}/train.jsonl, input_field: tokens, target_field: label}}
  batch_size: {batch}
  sampler: {sampler}
optimizers: [{{type: sgd, lr: 0.05, momentum: 0.9}}]
algorithm: {{name: gradient_allreduce}}
distributed: {{nproc_per_node: 2}}
train: {{epochs: {epochs}, log_every_steps: 10, threads: 1}}
checkpoint: {{resume: never}}
output: {{dir: {out}}}
""")
    r = subprocess.run([BAGUA, "run", recipe], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"bagua run {name} failed:\n{r.stdout}\n{r.stderr}")
    records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    steps = [x for x in records if "samples_per_s" in x]
    # Samples/s over the run after the first window: the sum of the
    # windows' samples over the sum of their times.
    samples = seconds = 0.0
    for prev, cur in zip(steps, steps[1:]):
        dt = cur["time"] - prev["time"]
        seconds += dt
        samples += cur["samples_per_s"] * dt
    padding = statistics.fmean(x["padding"] for x in steps)
    return samples / seconds, padding


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--samples", type=int, default=4000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--batch-max", type=int, default=256)
    args = p.parse_args()
    if not os.path.exists(BAGUA):
        sys.exit(f"{BAGUA} is missing: build bagua first (scripts/build.sh)")
    torch.manual_seed(0)
    work = tempfile.mkdtemp(prefix="bagua-lb-bench-")
    lengths = write_data(os.path.join(work, "train.jsonl"), args.samples, 1)
    torch.jit.script(ConvOverTokens()).save(os.path.join(work, "model.pt"))
    mean_len = statistics.fmean(lengths)
    budget = int(32 * mean_len)
    configs = [
        ("distributed", "{type: distributed}", 32),
        ("load_balancing", "{type: load_balancing, complexity_field: tokens}", 32),
        ("token budget", f"{{type: load_balancing, complexity_field: tokens, batch_complexity: {budget}}}",
         args.batch_max),
    ]
    print(f"{args.samples} sequences, mean length {mean_len:.0f} (min {min(lengths)}, max {max(lengths)}), "
          f"2 workers x 1 thread, {args.epochs} epochs, token budget {budget}")
    results = {name: [] for name, _, _ in configs}
    for _ in range(args.rounds):
        for name, sampler, batch in configs:
            results[name].append(run(work, name.replace(" ", "_"), sampler, args.epochs, batch))
    base = statistics.median(r[0] for r in results["distributed"])
    print(f"{'sampler':<16}{'samples/s':>12}{'range':>20}{'vs distributed':>16}{'padding':>10}")
    for name, _, _ in configs:
        rates = [r[0] for r in results[name]]
        pads = [r[1] for r in results[name]]
        med = statistics.median(rates)
        print(f"{name:<16}{med:>12.0f}{f'{min(rates):.0f}-{max(rates):.0f}':>20}{med / base:>15.2f}x"
              f"{statistics.median(pads):>10.1%}")


if __name__ == "__main__":
    main()
