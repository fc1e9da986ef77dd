#!/usr/bin/python3
"""bagua run (gradient_allreduce) versus PyTorch DDP on Gloo, side by side.

    /usr/bin/python3 bench/vs_ddp.py [--rounds 5] [--workers 2] [--steps 300] [--short 60]
    sudo /usr/bin/python3 bench/vs_ddp.py --link 1gbit     # over a loopback limited to 1 Gbit/s
    /usr/bin/python3 bench/vs_ddp.py --hidden 4096 --algorithms all   # the 20 M model, every algorithm
    /usr/bin/python3 bench/vs_ddp.py --model gpt --algorithms all     # a 3.3 M-parameter byte GPT

--algorithms runs several bagua algorithms (the synchronous ones), each
beside the same DDP baseline (NAME:SIZE, e.g. gradient_allreduce:auto or
gradient_allreduce:1MiB, is a row of its own with that
algorithm.bucket_size; with auto, keep --warmup above the (up to) 18 steps
bucket autotune takes); --ddp-malloc adds DDP with bagua's malloc
policy (train.allocator: tuned) as environment variables; --ddp-old adds,
as a row labelled so, DDP as torch 1.13 configures it by default
(zero_grad() zeroing in place, no gradient_as_bucket_view), the baseline
of the figures before 2026-11-27. --bagua-set KEY=VALUE (repeatable)
passes a recipe override to every bagua run (e.g.
algorithm.bucket_size=2097152).

Both train the same TorchScript MLP 784-H-H-10 (H = --hidden, 1024 by
default: 1.9 M parameters; 4096 gives 20 M) on Fashion-MNIST with
workers of 1 thread each, batch 64 per worker, SGD (lr 0.05, momentum 0.9),
the same DistributedSampler order; DDP's workers are started per rank
(Debian's torchrun is broken). DDP is at its best: zero_grad(set_to_none=True)
and gradient_as_bucket_view=True.

--model gpt trains instead a byte-level GPT (scripts/export_models.py's
ByteGPT, 4 layers, 256 wide, 8 heads, context 64: 3.3 M parameters in 54
tensors of many sizes) on recipes/data/bytes-train.bin (make it with
scripts/make_token_corpus.py), batch 16 per worker (--batch), AdamW (lr
0.001, weight decay 0.01), the loss over every position; bagua reads the
file as format: tokens, DDP's workers the same windows from a memory map. Each round runs, alternating, bagua and DDP
for --steps steps and again for --short steps. Two measurements per round:

  whole command  the difference in wall time between the long and the short
                 run of the whole command, over the difference in steps: the
                 steady-state cost of a step with nothing left out (start-up
                 cancels out);
  in loop        what each framework reports over the steps after the
                 warm-up (bagua: metrics.jsonl; DDP: timed in its loop).

--phases adds the anatomy of a step, phase by phase, bagua against each DDP
row (median over the rounds of ms per step on rank 0): bagua's from the
per-step trace of its long run (output.trace over up to 40 steps after the
warm-up), DDP's from perf_counter between its loop's phases. The phases
pair up as: data (bagua's also sets the learning rate and clears the
gradients; DDP's zero_grad is its own row), forward (with the loss),
backward (with the communication it overlaps and waits for; bagua's wait
is shown inside it), optimizer (bagua's also runs the non-finite check and,
on logging steps, the gradient norm), and bagua's own: the stop vote and
the metrics. "other" is the step's time outside the phases named.

Prints samples/s (all workers together): the median over the rounds with
the range, and bagua/DDP. --link RATE runs everything in a network namespace
of its own whose loopback is limited to RATE with tc's token bucket filter
(needs root; the namespace is removed at exit). Build bagua first
(scripts/build.sh).
"""
import argparse
import atexit
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import torch
from torch import nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BAGUA = os.path.join(ROOT, "build", "cli", "bagua")
FMNIST = "/usr/share/datasets/fashion-mnist/"
PREFIX = []  # ["ip", "netns", "exec", NS] under --link
BAGUA_SETS = []  # --bagua-set KEY=VALUE, passed to bagua run as --set


SYNCHRONOUS = ["gradient_allreduce", "bytegrad", "decentralized", "low_precision_decentralized", "qadam"]


CORPUS = os.path.join(ROOT, "recipes", "data", "bytes-train.bin")
CONTEXT = 64


def export_gpt(path):
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import export_models  # the shipped models' definitions
    model = export_models.ByteGPT(vocab=256, context=CONTEXT, dim=256, heads=8, layers=4)
    export_models.gpt_init(model)
    torch.jit.script(model).save(path)


def export_model(path, hidden):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                          nn.Linear(hidden, 10))
    torch.jit.script(model).save(path)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def limit_loopback(rate):
    """A network namespace whose loopback sends at `rate`; returns its name."""
    ns = f"bagua-vsddp-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    atexit.register(lambda: subprocess.run(["ip", "netns", "del", ns], check=False))
    subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
    subprocess.run(["tc", "-n", ns, "qdisc", "add", "dev", "lo", "root", "tbf", "rate", rate, "burst", "1mb",
                    "latency", "100ms"], check=True)
    return ns


def algorithm_block(name):
    """The recipe's algorithm: one machine, so no hierarchical variant; qadam
    with its own optimizer (it replaces the recipe's SGD)."""
    if name == "gradient_allreduce":
        return "{name: gradient_allreduce}"
    if name == "qadam":
        return "{name: qadam, hierarchical: false}"
    return f"{{name: {name}, hierarchical: false}}"


def trace_phases(path, steps):
    """ms per step of each phase in a bagua per-step trace (rank 0's)."""
    with open(path) as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    out = {}
    for e in events:
        if e.get("ph") != "X" or e.get("tid") != 1:  # the training thread's spans
            continue
        name = "step" if e["name"].startswith("step ") else e["name"]
        out[name] = out.get(name, 0.0) + e["dur"] / 1000.0
    return {k: v / steps for k, v in out.items()}


def run_bagua(tmp, model, workers, steps, warmup, batch, algorithm="gradient_allreduce", gpt=False, phases=False,
              bucket_size=None):
    """(wall seconds of the whole command, in-loop samples/s, ms per phase or None)."""
    tag = algorithm + (f"-{bucket_size}" if bucket_size else "")
    out = os.path.join(tmp, f"bagua-{tag}-{workers}-{steps}")
    recipe = os.path.join(tmp, f"bench-{tag}.yaml")
    optimizer = ("{type: qadam, lr: 0.001, warmup_steps: 20}" if algorithm == "qadam"
                 else "{type: adamw, lr: 0.001, weight_decay: 0.01}" if gpt
                 else "{type: sgd, lr: 0.05, momentum: 0.9}")
    train = (f"{{format: tokens, path: {CORPUS}, dtype: uint16, context: {CONTEXT}}}" if gpt else
             f"{{format: idx, images: {FMNIST}train-images-idx3-ubyte.gz, labels: {FMNIST}train-labels-idx1-ubyte.gz}}")
    with open(recipe, "w") as f:
        f.write(f"""name: bench
model: {{torchscript: {model}, loss: cross_entropy}}
data:
  train: {train}
  batch_size: {batch}
optimizers: [{optimizer}]
algorithm: {algorithm_block(algorithm)}
train: {{epochs: 1, max_steps: {steps}, log_every_steps: {warmup}, eval_every: never, threads: 1}}
checkpoint: {{resume: never, every_steps: 1000000}}
""")
        traced = min(40, steps - warmup)
        if phases:
            f.write(f"output: {{trace: true, trace_from_step: {warmup + 1}, trace_steps: {traced}}}\n")
    begin = time.perf_counter()
    sets = [a for kv in BAGUA_SETS for a in ("--set", kv)]
    if bucket_size:
        sets += ["--set", f"algorithm.bucket_size={bucket_size}"]
    subprocess.run(PREFIX + [BAGUA, "run", recipe, "--nproc-per-node", str(workers), "--set", f"output.dir={out}"] + sets,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=dict(os.environ, OMP_NUM_THREADS="1"))
    wall = time.perf_counter() - begin
    records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    for r in records:
        if "autotune" in r:
            print(f"    {tag}, {steps} steps: bucket_size auto chose {r['autotune']['bucket_bytes']} bytes",
                  file=sys.stderr)
    first = next(r for r in records if r.get("step") == warmup)
    last = [r for r in records if "time" in r][-1]
    ms = trace_phases(os.path.join(out, "trace", "rank-0.json"), traced) if phases else None
    return wall, (last["step"] - first["step"]) * batch * workers / (last["time"] - first["time"]), ms


# What train.allocator: tuned does inside bagua's workers, as glibc's
# environment variables (DDP's workers under --ddp-malloc).
TUNED_MALLOC = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": "4294967296", "MALLOC_ARENA_MAX": "1"}


def run_ddp(model, workers, steps, warmup, batch, malloc=None, gpt=False, old=False):
    """(wall seconds of the whole command, in-loop samples/s)."""
    port = free_port()
    procs = []
    begin = time.perf_counter()
    for rank in range(workers):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(workers), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1", DDP_OLD_CONFIGURATION="1" if old else "0",
                   **(malloc or {}))
        procs.append(subprocess.Popen(PREFIX + ["/usr/bin/python3", os.path.join(ROOT, "bench", "ddp_worker.py"),
                                                model, str(steps), str(warmup), str(batch)]
                                      + ([f"tokens:{CORPUS}:{CONTEXT}"] if gpt else []),
                                      env=env, stdout=subprocess.PIPE, text=True))
    outs = [p.communicate()[0] for p in procs]
    wall = time.perf_counter() - begin
    if any(p.returncode for p in procs):
        raise RuntimeError("a DDP worker failed")
    result = json.loads(outs[0].strip().splitlines()[-1])
    ms = dict(result["phase_ms"], step=result["step_ms"])
    return wall, result["samples_per_s"], ms


# Each row: (label, bagua's trace span, DDP's phase). None: no counterpart.
ANATOMY = [("step", "step", "step"), ("stop vote (bagua's)", "control: stop vote", None),
           ("data", "data", "data"), ("zero_grad", None, "zero_grad"), ("forward", "forward", "forward"),
           ("backward", "backward", "backward"), ("  of it waiting for communication", "wait for communication", None),
           ("optimizer", "optimizer", "optimizer"), ("metrics (bagua's)", "metrics", None)]


def print_anatomy(anatomy, baguas, ddps):
    """The table of --phases: ms per step, median over the rounds."""
    med = lambda n, key: statistics.median(r.get(key, 0.0) for r in anatomy[n]) if key and anatomy[n] else None
    cols = baguas + ddps
    print("\nanatomy of a step, ms (rank 0, median over the rounds)")
    print(f"{'phase':<34}" + "".join(f"{c[:22]:>24}" for c in cols))
    rows = ANATOMY + [("other", None, None)]
    for label, bkey, dkey in rows:
        cells = []
        for c in cols:
            if label == "other":
                named = [k for _, k, _ in ANATOMY[1:] if k and k != "wait for communication"] if c in baguas \
                    else [k for _, _, k in ANATOMY[1:] if k]
                v = med(c, "step") - sum(med(c, k) for k in named) if anatomy[c] else None
            else:
                v = med(c, bkey if c in baguas else dkey)
            cells.append(f"{v:>24.1f}" if v is not None else f"{'-':>24}")
        print(f"{label:<34}" + "".join(cells))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=300, help="steps of the long run")
    ap.add_argument("--short", type=int, default=60, help="steps of the short run (whole-command measurement)")
    ap.add_argument("--warmup", type=int, default=50, help="steps left out of the in-loop figure")
    ap.add_argument("--model", choices=["mlp", "gpt"], default="mlp")
    ap.add_argument("--batch", type=int, help="per worker (default 64 for the MLP, 16 for the GPT)")
    ap.add_argument("--hidden", type=int, default=1024, help="width of the two hidden layers (4096: 20 M parameters)")
    ap.add_argument("--algorithms", default="gradient_allreduce",
                    help="comma-separated bagua algorithms to run beside DDP, or 'all' (the synchronous ones); "
                         "NAME:SIZE is a row of its own with algorithm.bucket_size SIZE (gradient_allreduce:auto)")
    ap.add_argument("--ddp-malloc", action="store_true",
                    help="also run DDP with bagua's malloc policy set through glibc's environment variables")
    ap.add_argument("--ddp-old", action="store_true",
                    help="also run DDP as torch 1.13 configures it by default (zero_grad() in place, no bucket view)")
    ap.add_argument("--bagua-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a recipe override for every bagua run (bagua run --set), e.g. algorithm.bucket_size=4194304")
    ap.add_argument("--phases", action="store_true", help="also print each phase of a step, bagua against DDP")
    ap.add_argument("--link", metavar="RATE", help="limit the loopback to RATE (tc rate, e.g. 1gbit); needs root")
    args = ap.parse_args()
    gpt = args.model == "gpt"
    BAGUA_SETS.extend(args.bagua_set)
    if args.batch is None:
        args.batch = 16 if gpt else 64
    if gpt and not os.path.exists(CORPUS):
        ap.error(f"{CORPUS} is missing: make it with scripts/make_token_corpus.py")
    if args.short >= args.steps or args.warmup >= args.steps:
        ap.error("--short and --warmup must be below --steps")
    if not gpt and args.steps * args.batch * args.workers > 60000:
        # bagua's recipe trains one epoch; DDP's loop would wrap around.
        ap.error(f"--steps {args.steps} x --batch {args.batch} x --workers {args.workers} is more than one epoch "
                 "of Fashion-MNIST (60,000 samples): bagua would stop at the epoch's end")
    # NAME or NAME:BUCKET_SIZE (a row of its own: gradient_allreduce:auto).
    algorithms = SYNCHRONOUS if args.algorithms == "all" else args.algorithms.split(",")
    rows = []
    for entry in algorithms:
        a, _, size = entry.partition(":")
        if a not in SYNCHRONOUS:
            ap.error(f"--algorithms: {a} is not one of {', '.join(SYNCHRONOUS)}")
        rows.append((entry if size else a, a, size or None))
    if args.link:
        PREFIX.extend(["ip", "netns", "exec", limit_loopback(args.link)])
    w = args.workers
    warm = min(args.warmup, args.short - 1)
    runners = [(n, lambda s, a=a, size=size: run_bagua(tmp, model, w, s, warm, args.batch, a, gpt,
                                                       phases=args.phases and s == args.steps, bucket_size=size))
               for n, a, size in rows]
    runners.append(("DDP", lambda s: run_ddp(model, w, s, warm, args.batch, None, gpt)))
    if args.ddp_malloc:
        runners.append(("DDP, tuned malloc", lambda s: run_ddp(model, w, s, warm, args.batch, TUNED_MALLOC, gpt)))
    if args.ddp_old:
        runners.append(("DDP, old configuration", lambda s: run_ddp(model, w, s, warm, args.batch, None, gpt, old=True)))
    names = [n for n, _ in runners]
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "model.pt")
        if gpt:
            export_gpt(model)
        else:
            export_model(model, args.hidden)
        params = sum(p.numel() for p in torch.jit.load(model).parameters())
        whole = {n: [] for n in names}
        loop = {n: [] for n in names}
        anatomy = {n: [] for n in names}  # per round: {phase: ms per step}
        for rnd in range(args.rounds):
            for name, fn in runners:
                long_wall, in_loop, ms = fn(args.steps)
                short_wall, _, _ = fn(args.short)
                if ms:
                    anatomy[name].append(ms)
                per_step = (long_wall - short_wall) / (args.steps - args.short)
                whole[name].append(args.batch * w / per_step)
                loop[name].append(in_loop)
            print(f"  round {rnd + 1}: " + ", ".join(f"{n} {whole[n][-1]:.0f}/{loop[n][-1]:.0f}" for n in names)
                  + " samples/s (whole command/in loop)", file=sys.stderr)
    where = f"loopback limited to {args.link}" if args.link else "loopback"
    what = (f"byte GPT 4x256, context {CONTEXT} ({params / 1e6:.1f} M parameters), {os.path.basename(CORPUS)}" if gpt
            else f"MLP 784-{args.hidden}-{args.hidden}-10 ({params / 1e6:.1f} M parameters), Fashion-MNIST")
    print(f"{what}, {w} workers x 1 thread, batch {args.batch}/worker, {where}; {args.rounds} alternating rounds of "
          f"{args.steps}- and {args.short}-step runs")
    cell = lambda v: f"{statistics.median(v):.0f} ({min(v):.0f}-{max(v):.0f})"
    for label, data in (("whole command", whole), ("in loop", loop)):
        print(f"\n{label}")
        print(f"{'':<28} {'samples/s':>18} {'s/step':>8} {'vs DDP':>18} {'vs gradient_allreduce':>22}")
        for n in names:
            vs = lambda base: [b / d for b, d in zip(data[n], data[base])] if base in data and base != n else None
            rd, rg = vs("DDP"), vs("gradient_allreduce")
            rcell = lambda r: f"{statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f})" if r else "-"
            step = args.batch * w / statistics.median(data[n])
            print(f"{n:<28} {cell(data[n]):>18} {step:>8.3f} {rcell(rd):>18} {rcell(rg):>22}")
    print("(median over the rounds, range in brackets; ratios are the median of the per-round ratios of samples/s)")
    if args.phases:
        print_anatomy(anatomy, [n for n in names if not n.startswith("DDP")], [n for n in names if n.startswith("DDP")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
