#!/usr/bin/env python3
"""One-GPU `bagua run` against a plain PyTorch loop and PyTorch DDP, in one run.

    python3 bench/gpu_vs_torch.py --bagua build-cuda/cli/bagua [--repeats 3] [--steps 3000] [--window 250]
                                  [--models quickstart,wide,20m] [--precisions fp32,bf16,fp16]

Needs a PyTorch with CUDA (the `python3` that has it) and a CUDA build of
bagua (scripts/build.sh --cuda). Both train the same TorchScript model on
Fashion-MNIST on GPU 0: batch 64, SGD (lr 0.05, momentum 0.9), constant lr,
samples reshuffled every epoch, images gathered on the host per batch and
copied to the GPU, the loss summed on the GPU and read once per window.
bagua runs as `bagua run` with one worker (NCCL); PyTorch as a plain loop
in this process, and as the same loop through DistributedDataParallel
(NCCL, world size 1: its bucketing and hooks, with nothing to send). The
figure is samples/s per window of --window steps, the first window
(warm-up) left out, median over windows; the three alternate --repeats
times. Models: the quickstart MLP (784-256-10), a wider MLP
(784-1024-1024-10) and the 20 M-parameter MLP of docs/benchmarks.md
(784-4096-4096-10), the last two exported here with torch.jit.script.

Precisions: fp32; bf16 (bagua's train.precision: bf16 against the loop's
forward and loss under torch.autocast("cuda", torch.bfloat16)); fp16
(train.precision: fp16 against torch.autocast with float16 and
torch.amp.GradScaler, PyTorch's own recipe for it). The PyTorch loops are
PyTorch at its best: zero_grad(set_to_none=True), and DDP with
gradient_as_bucket_view=True.
"""
import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FMNIST = "/usr/share/datasets/fashion-mnist/"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


AUTOCAST = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def torch_loop(model_path, steps, window, batch, device, ddp=False, precision="fp32"):
    images = torch.from_numpy(read_idx(FMNIST + "train-images-idx3-ubyte.gz").copy()).float().div_(255.0)
    images = images.view(-1, 1, 28, 28)
    labels = torch.from_numpy(read_idx(FMNIST + "train-labels-idx1-ubyte.gz").copy()).long()
    torch.manual_seed(0)
    model = torch.jit.load(model_path).to(device)
    model.train()
    if ddp:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index],
                                                          gradient_as_bucket_view=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    dtype = AUTOCAST[precision]
    scaler = torch.amp.GradScaler("cuda") if precision == "fp16" else None
    gen = torch.Generator().manual_seed(0)
    loss_sum = torch.zeros((), dtype=torch.float64, device=device)
    rates, step, epoch = [], 0, 0
    t0 = time.perf_counter()
    while step < steps:
        order = torch.randperm(len(images), generator=gen)
        for b in range(0, len(order) - batch + 1, batch):
            idx = order[b:b + batch]
            x = images[idx].to(device, non_blocking=True)
            y = labels[idx].to(device, non_blocking=True)
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
                loss = F.cross_entropy(model(x).float(), y)
            if scaler:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
            loss_sum += loss.detach().double()
            step += 1
            if step % window == 0:
                loss_sum.item()  # one sync per window, as bagua's metrics do
                loss_sum.zero_()
                t1 = time.perf_counter()
                rates.append(window * batch / (t1 - t0))
                t0 = t1
            if step >= steps:
                break
        epoch += 1
    return rates


def bagua_run(bagua, tmp, model_path, steps, window, batch, precision="fp32"):
    out = os.path.join(tmp, "bagua-out")
    recipe = os.path.join(tmp, "bench.yaml")
    with open(recipe, "w") as f:
        f.write(f"""name: gpu-bench
model: {{torchscript: {model_path}, loss: cross_entropy}}
data:
  train: {{format: idx, images: {FMNIST}train-images-idx3-ubyte.gz, labels: {FMNIST}train-labels-idx1-ubyte.gz}}
  batch_size: {batch}
optimizers: [{{type: sgd, lr: 0.05, momentum: 0.9}}]
algorithm: {{name: gradient_allreduce}}
distributed: {{nproc_per_node: 1}}
train: {{epochs: 100, max_steps: {steps}, log_every_steps: {window}, eval_every: never, device: cuda,
        precision: {precision}}}
checkpoint: {{resume: never, every_steps: 100000000}}
output: {{dir: {out}}}
""")
    subprocess.run([bagua, "run", recipe], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    rates = []
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            if "samples_per_s" in j:
                rates.append(j["samples_per_s"])
    return rates


def export_mlp(path, hidden):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, hidden), torch.nn.ReLU(),
                                torch.nn.Linear(hidden, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10))
    torch.jit.script(model).save(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bagua", default=os.path.join(ROOT, "build-cuda", "cli", "bagua"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--window", type=int, default=250)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--models", default="quickstart,wide,20m", help="comma-separated: quickstart, wide, 20m")
    ap.add_argument("--precisions", default="fp32,bf16,fp16", help="comma-separated: fp32, bf16, fp16")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_vs_torch: this python's torch sees no GPU")
    device = torch.device("cuda", 0)
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, batch {args.batch}, "
          f"{args.steps} steps, samples/s per {args.window}-step window (median, first window left out)")
    # DDP of one rank over NCCL, in this process.
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.distributed.init_process_group("nccl", rank=0, world_size=1)
    with tempfile.TemporaryDirectory() as tmp:
        known = {"quickstart": ("mlp 784-256-10", os.path.join(ROOT, "recipes", "models", "mlp.pt"), None),
                 "wide": ("mlp 784-1024-1024-10", os.path.join(tmp, "wide.pt"), 1024),
                 "20m": ("mlp 784-4096-4096-10", os.path.join(tmp, "mlp20m.pt"), 4096)}
        models = []
        for key in args.models.split(","):
            if key not in known:
                sys.exit(f"gpu_vs_torch: unknown model {key!r} (known: {', '.join(known)})")
            name, path, hidden = known[key]
            if hidden:
                export_mlp(path, hidden)
            models.append((name, path))
        precisions = args.precisions.split(",")
        for p in precisions:
            if p not in AUTOCAST:
                sys.exit(f"gpu_vs_torch: unknown precision {p!r} (known: {', '.join(AUTOCAST)})")
        print(f"{'model':>22} {'prec':>5} {'round':>5} {'bagua':>10} {'pytorch':>10} {'ddp':>10} {'b/pt':>7} {'b/ddp':>7}")
        for (name, path), prec in [(m, p) for m in models for p in precisions]:
            ratios, ddp_ratios = [], []
            for r in range(args.repeats):
                b = statistics.median(bagua_run(args.bagua, tmp, path, args.steps, args.window, args.batch, prec)[1:])
                t = statistics.median(torch_loop(path, args.steps, args.window, args.batch, device, False, prec)[1:])
                d = statistics.median(torch_loop(path, args.steps, args.window, args.batch, device, True, prec)[1:])
                ratios.append(b / t)
                ddp_ratios.append(b / d)
                print(f"{name:>22} {prec:>5} {r + 1:>5} {b:>10.0f} {t:>10.0f} {d:>10.0f} {b / t:>7.3f} {b / d:>7.3f}",
                      flush=True)
            print(f"{name:>22} {prec:>5} bagua/pytorch median {statistics.median(ratios):.3f} "
                  f"(spread {min(ratios):.3f}-{max(ratios):.3f}); bagua/ddp median "
                  f"{statistics.median(ddp_ratios):.3f} (spread {min(ddp_ratios):.3f}-{max(ddp_ratios):.3f})",
                  flush=True)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
