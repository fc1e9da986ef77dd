#!/usr/bin/python3
"""bagua run (gradient_allreduce) versus PyTorch DDP on Gloo, in one run.

    /usr/bin/python3 bench/vs_ddp.py [--repeats 3] [--steps 300] [--warmup 50]

Both train the same TorchScript MLP 784-1024-1024-10 on Fashion-MNIST with
workers of 1 thread each, batch 64 per worker, SGD (lr 0.05, momentum 0.9),
the same DistributedSampler order. For 1 and 2 workers, each framework runs
`--repeats` times, alternating; the figure is the median of samples/s (all
workers together) over the steps after the warm-up. Prints the table, the
bagua/DDP ratio and each framework's scaling efficiency from 1 to 2 workers.
Build bagua first (scripts/build.sh).
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile

import torch
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BAGUA = os.path.join(ROOT, "build", "cli", "bagua")
FMNIST = "/usr/share/datasets/fashion-mnist/"


def export_model(path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 10))
    torch.jit.script(model).save(path)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_bagua(tmp, model, workers, steps, warmup, batch):
    out = os.path.join(tmp, f"bagua-{workers}")
    recipe = os.path.join(tmp, "bench.yaml")
    with open(recipe, "w") as f:
        f.write(f"""name: bench
model: {{torchscript: {model}, loss: cross_entropy}}
data:
  train: {{format: idx, images: {FMNIST}train-images-idx3-ubyte.gz, labels: {FMNIST}train-labels-idx1-ubyte.gz}}
  batch_size: {batch}
optimizers: [{{type: sgd, lr: 0.05, momentum: 0.9}}]
algorithm: {{name: gradient_allreduce}}
train: {{epochs: 1, max_steps: {steps}, log_every_steps: {warmup}, eval_every: never, threads: 1}}
checkpoint: {{resume: never, every_steps: 1000000}}
""")
    subprocess.run([BAGUA, "run", recipe, "--nproc-per-node", str(workers), "--set", f"output.dir={out}"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=dict(os.environ, OMP_NUM_THREADS="1"))
    records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    first = next(r for r in records if r["step"] == warmup)
    last = records[-1]
    return (last["step"] - first["step"]) * batch * workers / (last["time"] - first["time"])


def run_ddp(model, workers, steps, warmup, batch):
    port = free_port()
    procs = []
    for rank in range(workers):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(workers), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen(["/usr/bin/python3", os.path.join(ROOT, "bench", "ddp_worker.py"), model,
                                       str(steps), str(warmup), str(batch)],
                                      env=env, stdout=subprocess.PIPE, text=True))
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError("a DDP worker failed")
    return json.loads(outs[0].strip().splitlines()[-1])["samples_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "mlp.pt")
        export_model(model)
        results = {}
        for workers in (1, 2):
            for name in ("bagua", "ddp"):
                results[(name, workers)] = []
            for rep in range(args.repeats):
                results[("bagua", workers)].append(run_bagua(tmp, model, workers, args.steps, args.warmup, args.batch))
                results[("ddp", workers)].append(run_ddp(model, workers, args.steps, args.warmup, args.batch))
                print(f"  workers={workers} repeat {rep + 1}: bagua {results[('bagua', workers)][-1]:.0f}, "
                      f"ddp {results[('ddp', workers)][-1]:.0f} samples/s", file=sys.stderr)
        med = {k: statistics.median(v) for k, v in results.items()}
        print(f"MLP 784-1024-1024-10, Fashion-MNIST, batch {args.batch}/worker, 1 thread/worker, "
              f"{args.steps} steps ({args.warmup} warm-up), median of {args.repeats}")
        print(f"{'workers':>8} {'bagua samples/s':>16} {'DDP samples/s':>14} {'bagua/DDP':>10}")
        for workers in (1, 2):
            print(f"{workers:>8} {med[('bagua', workers)]:>16.0f} {med[('ddp', workers)]:>14.0f} "
                  f"{med[('bagua', workers)] / med[('ddp', workers)]:>10.2f}")
        for name in ("bagua", "ddp"):
            eff = med[(name, 2)] / (2 * med[(name, 1)])
            print(f"scaling efficiency 1->2 workers, {name}: {eff:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
