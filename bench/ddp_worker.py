#!/usr/bin/python3
"""One rank of the PyTorch DDP baseline for bench/vs_ddp.py (Debian's
python3-torch, Gloo). Started per rank with RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT set (Debian's torchrun is broken on its Python 3.11).

Trains the given TorchScript model on Fashion-MNIST exactly as the bagua
recipe does: DistributedSampler (shuffle, seed 0), batch B per worker, SGD
lr 0.05 momentum 0.9, cross-entropy; prints one JSON line with the samples/s
of all workers together over the steps after the warm-up. With a fifth
argument tokens:PATH:CONTEXT, on the windows of a uint16 token file as
bagua's format: tokens cuts them (sample i: tokens [i*C, i*C + C] as input
and its shift as target), with AdamW (lr 0.001, weight decay 0.01) and the
loss over every position. DDP at its best: zero_grad(set_to_none=True),
gradient_as_bucket_view=True; with DDP_OLD_CONFIGURATION=1 in the
environment, torch 1.13's defaults instead (zero_grad() zeroes in place, no
bucket view), for bench/vs_ddp.py --ddp-old.
"""
import gzip
import json
import os
import struct
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def load_idx(images, labels):
    with gzip.open(images, "rb") as f:
        _, n, rows, cols = struct.unpack(">IIII", f.read(16))
        x = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).view(n, rows * cols)
    with gzip.open(labels, "rb") as f:
        struct.unpack(">II", f.read(8))
        y = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).to(torch.int64)
    return x, y


def main():
    model_path, steps, warmup, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    tokens = sys.argv[5].split(":") if len(sys.argv) > 5 else None
    old = os.environ.get("DDP_OLD_CONFIGURATION") == "1"
    model = DDP(torch.jit.load(model_path), gradient_as_bucket_view=not old)
    if tokens:
        import numpy as np
        context = int(tokens[2])
        ids = np.memmap(tokens[1], dtype=np.uint16, mode="r")
        count = (len(ids) - 1) // context
        opt = torch.optim.AdamW(model.parameters(), lr=0.001, weight_decay=0.01)

        def batch_of(idx):
            w = torch.stack([torch.from_numpy(ids[i * context:i * context + context + 1].astype(np.int64))
                             for i in idx.tolist()])
            return w[:, :-1], w[:, 1:]
    else:
        src = "/usr/share/datasets/fashion-mnist/"
        x, y = load_idx(src + "train-images-idx3-ubyte.gz", src + "train-labels-idx1-ubyte.gz")
        count = len(y)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

        def batch_of(idx):
            return x[idx].to(torch.float32) / 255.0, y[idx]
    sampler = torch.utils.data.DistributedSampler(range(count), num_replicas=world, rank=rank, shuffle=True, seed=0)
    sampler.set_epoch(0)
    indices = list(sampler)
    start = None
    # Seconds per phase over the steps after the warm-up (vs_ddp.py --phases
    # sets them beside bagua's trace): perf_counter between the phases.
    phases = {"data": 0.0, "zero_grad": 0.0, "forward": 0.0, "backward": 0.0, "optimizer": 0.0}
    for step in range(steps):
        if step == warmup:
            dist.barrier()
            start = time.perf_counter()
            for k in phases:
                phases[k] = 0.0
        t0 = time.perf_counter()
        idx = torch.tensor(indices[(step * batch) % len(indices):][:batch])
        xb, yb = batch_of(idx)
        t1 = time.perf_counter()
        opt.zero_grad(set_to_none=not old)
        t2 = time.perf_counter()
        out = model(xb)
        loss = torch.nn.functional.cross_entropy(out.reshape(-1, out.size(-1)), yb.reshape(-1))
        t3 = time.perf_counter()
        loss.backward()
        t4 = time.perf_counter()
        opt.step()
        t5 = time.perf_counter()
        for k, a, b in (("data", t0, t1), ("zero_grad", t1, t2), ("forward", t2, t3), ("backward", t3, t4),
                        ("optimizer", t4, t5)):
            phases[k] += b - a
    dist.barrier()
    elapsed = time.perf_counter() - start
    if rank == 0:
        timed = steps - warmup
        print(json.dumps({"samples_per_s": timed * batch * world / elapsed, "step_ms": 1000 * elapsed / timed,
                          "phase_ms": {k: 1000 * v / timed for k, v in phases.items()}}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
