#!/usr/bin/python3
"""bf16 against fp32, and gradient accumulation against one micro-batch,
on the shipped byte-level GPT (recipes/bytes-gpt.yaml), side by side.

    /usr/bin/python3 bench/training_features.py [--bagua BINARY] [--steps N] [--rounds R]

Each configuration trains the recipe's model for N steps (default 120) on 2
workers, no evaluation, R rounds each (default 3), alternating, and the
figures are the median over rounds of the metrics records after the
first (the first window holds start-up):
  precision     train.precision fp32 against bf16, batch 16 x 2 micro-batches
                (the recipe's): samples/s and the final training loss
  accumulation  train.grad_accum_steps 1 against 4, data.batch_size 16 (so 4
                sends 4x the samples per step): comm_bytes per sample and
                seconds per sample
Loopback only; the machine and its cores are printed with the figures.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(bagua, out, sets):
    cmd = [bagua, "run", os.path.join(ROOT, "recipes", "bytes-gpt.yaml"), "--set", f"output.dir={out}",
           "--set", "checkpoint.resume=never", "--set", "train.eval_every=never", "--set", "train.log_every_steps=20"]
    for s in sets:
        cmd += ["--set", s]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        sys.exit(f"bagua run failed ({' '.join(cmd)}):\n{done.stdout[-3000:]}")
    records = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if '"samples_per_s"' in l]
    return records[1:] if len(records) > 1 else records


def figures(records, samples_per_step):
    sps = statistics.median(r["samples_per_s"] for r in records)
    steps = [(records[i]["step"] - records[i - 1]["step"]) for i in range(1, len(records))] or [20]
    comm = statistics.median(r["comm_bytes"] for r in records) / (steps[0] * samples_per_step)
    return {"samples_per_s": sps, "s_per_sample": 1.0 / sps, "comm_per_sample": comm, "loss": records[-1]["loss"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bagua", default=os.path.join(ROOT, "build", "cli", "bagua"))
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    configs = {
        "fp32": (["train.precision=fp32"], 64),
        "bf16": (["train.precision=bf16"], 64),
        "accum 1": (["train.grad_accum_steps=1", "data.batch_size=16"], 32),
        "accum 4": (["train.grad_accum_steps=4", "data.batch_size=16"], 128),
    }
    results = {name: [] for name in configs}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name, (sets, per_step) in configs.items():
                out = os.path.join(tmp, f"{name.replace(' ', '')}-{r}")
                results[name].append(figures(run(args.bagua, out, sets + [f"train.max_steps={args.steps}"]), per_step))
    med = {n: {k: statistics.median(x[k] for x in v) for k in v[0]} for n, v in results.items()}
    rng = {n: (min(x["samples_per_s"] for x in v), max(x["samples_per_s"] for x in v)) for n, v in results.items()}
    print(f"machine: {os.cpu_count()} cores; 2 workers on loopback; {args.steps} steps, median of {args.rounds} rounds")
    print("\nprecision (batch 16 x 2 micro-batches per worker, clip 1.0)")
    print(f"  {'':6} {'samples/s':>10} {'range':>17} {'final loss':>11}")
    for n in ("fp32", "bf16"):
        print(f"  {n:6} {med[n]['samples_per_s']:10.0f} {rng[n][0]:8.0f}-{rng[n][1]:<8.0f} {med[n]['loss']:11.4f}")
    print(f"  bf16 / fp32 samples/s: {med['bf16']['samples_per_s'] / med['fp32']['samples_per_s']:.2f}x")
    print("\naccumulation (micro-batches of 16 per worker)")
    print(f"  {'':8} {'samples/s':>10} {'comm B/sample':>14} {'s/sample':>10}")
    for n in ("accum 1", "accum 4"):
        print(f"  {n:8} {med[n]['samples_per_s']:10.0f} {med[n]['comm_per_sample']:14.0f} {med[n]['s_per_sample']:10.2e}")
    a, b = med["accum 1"], med["accum 4"]
    print(f"  N=4 / N=1: comm per sample {b['comm_per_sample'] / a['comm_per_sample']:.3f}x (goal <= 0.25), "
          f"time per sample {b['s_per_sample'] / a['s_per_sample']:.2f}x (goal <= 1)")


if __name__ == "__main__":
    main()
