#!/usr/bin/python3
"""The streamed data formats (format: tokens, format: image_folder): worker
memory, loader threads, and PyTorch's DataLoader on the same files.

    /usr/bin/python3 bench/streamed_data.py [rss] [loader] [dataloader] [--quick] [--repeat N] [--bagua BINARY]

Each section prints a table and a one-line verdict; all three run unless
some are named. Everything is written to a temporary folder, removed at
the end. The machine's core count and load average are printed first:
loader threads, workers and anything else running share the cores, so on
a small or busy machine every figure moves.

  rss         Peak memory of each worker of recipes/bytes-gpt.yaml (context
              64, batch 32, 2 workers, shuffled, 200 steps) on a 20 MiB and
              on a 2 GiB token file, polled from /proc as bench/peak_rss.py
              does (VmHWM, the peak resident set, and RssAnon, its private
              part), with each rank's ru_maxrss from metrics.jsonl beside.
              Both files hold random uint16 ids below 256, written in full
              (not sparse), so their pages are real and in the page cache
              when the runs read them. The target: the 2 GiB file costs a
              worker at most 64 MiB more than the 20 MiB one.
  loader      recipes/fashion-images-cnn.yaml on 6,000 28x28 gray PNGs
              (scripts/make_image_folder.py --train-per-class 600) and
              recipes/bytes-gpt.yaml on its corpus
              (scripts/make_token_corpus.py), 2 workers, with
              data.loader_threads 0, 1, 2 (and auto for the images): the
              samples/s of both workers (metrics.jsonl, from the first
              record to the last) and the share of the step spent in the
              data phase (--trace: the "data" spans over the "step N" spans,
              both workers). With 0 threads the data phase is the whole
              load, so batch / data phase is what one thread loads per
              second. The target: data under 5% of the step on the image
              recipe with 2 workers.
  dataloader  Loading alone, no model, on the same image folder and token
              corpus. bagua: 1 worker training a one-parameter TorchScript
              model whose loss (w^2) never reads the batch, so the step is
              little more than the wait for the batch (samples/s as above,
              a lower bound of the loading rate: the step's own bookkeeping
              is in it). PyTorch: torch.utils.data.DataLoader, batch 32,
              shuffled, num_workers 0, 1, 2 (persistent workers; the clock
              starts at the first batch, after the workers' start). Without
              PIL or torchvision there is no PNG decoder in Python here, so
              the DataLoader decodes with the pure-Python decoder below
              (zlib and the PNG row filters), then pads, crops, flips and
              normalises with torch as the recipe does: what a user without
              torchvision would run. The tokens: a Dataset of memory-mapped
              windows (numpy.memmap), and nanoGPT's get_batch (random
              offsets into a memmap made anew per batch) in the main process.
              There is no JPEG writer here (no PIL, no ImageMagick), so only
              PNG is measured.

--quick: tiny sizes and few steps (a smoke test of a few tens of seconds);
its figures mean nothing. --repeat N (default 3; 1 with --quick): runs per
bagua configuration, the row with the median samples/s is shown.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
import zlib

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from peak_rss import poll

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPT = os.path.join(ROOT, "recipes", "bytes-gpt.yaml")
CNN = os.path.join(ROOT, "recipes", "fashion-images-cnn.yaml")
MIB = 2**20
BATCH = 32  # both recipes'
CONTEXT = 64  # bytes-gpt's


# ---------------------------------------------------------------- bagua runs

class Run:
    """One finished `bagua run`: its metrics records, its trace (if any) and its log."""

    def __init__(self, out, log, pid, peaks=None):
        self.out, self.log, self.pid, self.peaks = out, log, pid, peaks
        with open(os.path.join(out, "metrics.jsonl")) as f:
            self.records = [json.loads(line) for line in f]

    def samples_per_s(self, workers):
        """Steady rate: samples of all workers from the first training record to the last."""
        train = [r for r in self.records if "loss" in r]
        first, last = train[0], train[-1]
        return (last["step"] - first["step"]) * BATCH * workers / (last["time"] - first["time"])

    def trace(self, workers):
        """(traced steps per worker, mean step ms, mean data ms, data share of the step), all workers."""
        steps = data = 0.0
        count = 0
        for rank in range(workers):
            with open(os.path.join(self.out, "trace", f"rank-{rank}.json")) as f:
                events = json.load(f)["traceEvents"]
            for e in events:
                if e.get("ph") != "X":
                    continue
                if e.get("cat") == "step":
                    steps += e["dur"]
                    count += 1
                elif e.get("cat") == "phase" and e["name"] == "data":
                    data += e["dur"]
        return count // workers, steps / count / 1000, data / count / 1000, data / steps

    def peak_rss_bytes(self):
        """Each rank's ru_maxrss, from the run's last record."""
        return next(r["peak_rss_bytes"] for r in reversed(self.records) if "peak_rss_bytes" in r)

    def loader_line(self):
        return next((line for line in self.log.splitlines() if line.startswith("loader:")), "")


def bagua_run(args, tmp, recipe, sets, watch_rss=False):
    """Runs `recipe` with --set `sets` into a fresh output folder under `tmp`."""
    bagua_run.count = getattr(bagua_run, "count", 0) + 1
    out = os.path.join(tmp, f"run-{bagua_run.count}")
    cmd = [args.bagua, "run", recipe, "--set", f"output.dir={out}", "--set", "checkpoint.resume=never",
           "--set", "checkpoint.every_steps=1000000", "--set", "data.eval=null"]
    for s in sets:
        cmd += ["--set", s]
    log_path = out + ".log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        peaks = poll(proc) if watch_rss else None
        proc.wait()
    with open(log_path) as f:
        log = f.read()
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed with exit code {proc.returncode}:\n{log[-3000:]}")
    return Run(out, log, proc.pid, peaks)


def traced(steps, trace_from):
    """--set values for a run of `steps` steps, traced from `trace_from` to the end, logged every tenth."""
    return [f"train.max_steps={steps}", "train.epochs=1000", f"train.log_every_steps={max(1, steps // 10)}",
            "output.trace=true", f"output.trace_from_step={trace_from}",
            f"output.trace_steps={steps - trace_from + 1}"]


def median_run(args, tmp, recipe, sets, workers):
    """args.repeat runs of the same configuration; the one with the median samples/s."""
    runs = sorted((bagua_run(args, tmp, recipe, sets) for _ in range(args.repeat)),
                  key=lambda r: r.samples_per_s(workers))
    return runs[len(runs) // 2]


# ---------------------------------------------------------------- data

def write_tokens(path, count, rng):
    """`count` random uint16 ids below 256, written in chunks of 32 Mi ids."""
    with open(path, "wb") as f:
        left = count
        while left:
            n = min(left, 32 * MIB)
            rng.integers(0, 256, n, dtype=np.uint16).tofile(f)
            left -= n


def make_images(tmp, per_class):
    out = os.path.join(tmp, "images")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_image_folder.py"), "--out", out,
                    "--train-per-class", str(per_class), "--val-per-class", "0"],
                   check=True, stdout=subprocess.DEVNULL)
    return os.path.join(out, "fashion-images", "train")


def make_corpus(tmp):
    out = os.path.join(tmp, "corpus")
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "make_token_corpus.py"), "--out", out],
                   check=True, stdout=subprocess.DEVNULL)
    return os.path.join(out, "bytes-train.bin")


def data_once(args, tmp):
    """The image folder and the token corpus, made once for the sections that use them."""
    if not hasattr(data_once, "paths"):
        data_once.paths = make_images(tmp, 50 if args.quick else 600), make_corpus(tmp)
    return data_once.paths


def trivial_model(tmp):
    """A one-parameter model whose loss (w^2) ignores the batch: a step that costs next to nothing."""
    path = os.path.join(tmp, "trivial.pt")
    if not os.path.exists(path):
        class Trivial(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = torch.nn.Parameter(torch.zeros(1))

            def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
                return (self.w * self.w).sum()

        torch.jit.script(Trivial()).save(path)
    return path


# ---------------------------------------------------------------- sections

def section_rss(args, tmp):
    small_bytes, big_bytes = (1 * MIB, 64 * MIB) if args.quick else (20 * MIB, 2048 * MIB)
    steps = 20 if args.quick else 200
    rng = np.random.default_rng(0)
    start = time.monotonic()
    paths = {}
    for size in (small_bytes, big_bytes):
        paths[size] = os.path.join(tmp, f"tokens-{size // MIB}MiB.bin")
        write_tokens(paths[size], size // 2, rng)
    made = time.monotonic() - start
    windows = lambda size, stride: (size // 2 - CONTEXT - 1) // stride + 1  # noqa: E731
    sparse = big_bytes // 2 // windows(small_bytes, CONTEXT)  # the big file, as many samples as the small
    print(f"\n== rss: peak memory per worker, bytes-gpt (context {CONTEXT}, batch {BATCH}, 2 workers, "
          f"shuffled), {steps} steps")
    print(f"token files of random uint16 ids < 256, written in full (not sparse) in {made:.1f}s, "
          "in the page cache when read")
    print(f"{'token file':>11} {'stride':>7} {'samples':>9} {'worker':>7} {'VmHWM MiB':>10} {'RssAnon MiB':>12} "
          f"{'ru_maxrss MiB':>14}")
    worst = {}
    for size, stride in ((small_bytes, CONTEXT), (big_bytes, CONTEXT), (big_bytes, sparse)):
        run = bagua_run(args, tmp, GPT, [f"data.train.path={paths[size]}", f"data.train.stride={stride}",
                                         f"train.max_steps={steps}", f"train.log_every_steps={steps}"],
                        watch_rss=True)
        hwm, anon = run.peaks
        workers = sorted(pid for pid in hwm if pid != run.pid)  # the launcher's children, in start order
        maxrss = run.peak_rss_bytes()
        for i, pid in enumerate(workers):
            theirs = f"{maxrss[i] / MIB:14.0f}" if i < len(maxrss) else f"{'?':>14}"
            print(f"{size // MIB:>7} MiB {stride:>7} {windows(size, stride):>9} {i:>7} {hwm[pid] / MIB:10.0f} "
                  f"{anon[pid] / MIB:12.0f} {theirs}", flush=True)
        worst[size, stride] = (max(hwm[p] for p in workers) / MIB, max(anon[p] for p in workers) / MIB)
    base = worst[small_bytes, CONTEXT]
    grow = [tuple(a - b for a, b in zip(worst[big_bytes, stride], base)) for stride in (CONTEXT, sparse)]
    print(f"verdict: the {big_bytes // MIB} MiB file costs the largest worker {grow[0][0]:+.0f} MiB VmHWM "
          f"({grow[0][1]:+.0f} MiB RssAnon) over the {small_bytes // MIB} MiB one: "
          f"{'within' if grow[0][0] <= 64 else 'NOT within'} the 64 MiB target; read with stride {sparse} "
          f"(as many samples as the small file, pages all over the big one) {grow[1][0]:+.0f} MiB: "
          + ("the growth follows the number of samples, not the bytes mapped" if grow[1][0] <= 64 < grow[0][0]
             else "the growth follows the bytes mapped" if grow[1][0] > 64 else "no growth to explain"))


def section_loader(args, tmp):
    images, corpus = data_once(args, tmp)
    img_steps, tok_steps = (40, 12) if args.quick else (400, 40)
    print(f"\n== loader: data.loader_threads in training, 2 workers, batch {BATCH} each "
          f"(median of {args.repeat} runs by samples/s)")
    print(f"{'recipe':<20} {'threads':>8} {'samples/s':>10} {'step ms':>8} {'data ms':>8} {'data share':>11}")
    share = {}
    one_thread = {}
    for name, recipe, path, steps, settings in (
            ("fashion-images-cnn", CNN, images, img_steps, ("0", "1", "2", "auto")),
            ("bytes-gpt", GPT, corpus, tok_steps, ("0", "1", "2"))):
        for threads in settings:
            run = median_run(args, tmp, recipe, [f"data.train.path={path}", f"data.loader_threads={threads}"]
                             + traced(steps, steps // 4 + 1), 2)
            count, step_ms, data_ms, part = run.trace(2)
            label = threads
            if threads == "auto":
                label = "auto=" + run.loader_line().split()[1]  # "loader: N thread(s) ..."
            print(f"{name:<20} {label:>8} {run.samples_per_s(2):10.0f} {step_ms:8.2f} {data_ms:8.3f} "
                  f"{100 * part:10.1f}%", flush=True)
            share[name, threads] = part
            if threads == "0":
                one_thread[name] = BATCH / data_ms * 1000
    print(f"one loader thread (batch / data phase at 0 threads, 2 workers busy beside it): "
          f"{one_thread['fashion-images-cnn']:.0f} images/s, "
          f"{one_thread['bytes-gpt']:.0f} windows/s ({one_thread['bytes-gpt'] * CONTEXT / 1e6:.1f} M tokens/s)")
    best = min(share["fashion-images-cnn", t] for t in ("1", "2", "auto"))
    auto = share["fashion-images-cnn", "auto"]
    print(f"verdict: image recipe, 2 workers on {os.cpu_count()} cores: data is {100 * auto:.1f}% of the step "
          f"with auto threads (best {100 * best:.1f}%, {100 * share['fashion-images-cnn', '0']:.1f}% with none): "
          f"{'meets' if auto < 0.05 else 'does NOT meet'} the 5% target")


def decode_png(data):
    """An 8-bit gray or RGB PNG (not interlaced) as a uint8 tensor [C, H, W],
    in pure Python: zlib, then each row's filter undone (None, Sub, Up,
    Average, Paeth)."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat = 8, []
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or color not in (0, 2) or interlace:
                raise ValueError("only 8-bit gray or RGB PNGs, not interlaced")
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + length
    channels = 1 if color == 0 else 3
    raw = zlib.decompress(b"".join(idat))
    stride = width * channels
    pixels = bytearray(height * stride)
    prev = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, row = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        if kind == 1:
            for i in range(channels, stride):
                row[i] = (row[i] + row[i - channels]) & 255
        elif kind == 2:
            for i in range(stride):
                row[i] = (row[i] + prev[i]) & 255
        elif kind == 3:
            for i in range(stride):
                left = row[i - channels] if i >= channels else 0
                row[i] = (row[i] + ((left + prev[i]) >> 1)) & 255
        elif kind == 4:
            for i in range(stride):
                a = row[i - channels] if i >= channels else 0
                b, c = prev[i], prev[i - channels] if i >= channels else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        pixels[y * stride:(y + 1) * stride] = row
        prev = row
    return torch.frombuffer(pixels, dtype=torch.uint8).view(height, width, channels).permute(2, 0, 1)


class PngFolder(Dataset):
    """ROOT/CLASS/*.png as the recipe reads it: decoded, padded by 2, cropped
    back to 28x28 at random, flipped with probability 1/2, normalised."""

    def __init__(self, root):
        classes = sorted(os.listdir(root))
        self.files = [(os.path.join(root, c, f), k) for k, c in enumerate(classes)
                      for f in sorted(os.listdir(os.path.join(root, c)))]

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        path, label = self.files[i]
        with open(path, "rb") as f:
            x = decode_png(f.read()).float().div_(255)
        x = torch.nn.functional.pad(x, (2, 2, 2, 2))
        top, left = torch.randint(0, 5, (2,)).tolist()
        x = x[:, top:top + 28, left:left + 28]
        if torch.rand(()) < 0.5:
            x = x.flip(2)
        return (x - 0.286) / 0.353, label


class TokenWindows(Dataset):
    """Sample i: the CONTEXT + 1 ids from i x CONTEXT of a uint16 file, read through numpy.memmap."""

    def __init__(self, path):
        self.path, self.ids = path, None
        self.n = (os.path.getsize(path) // 2 - CONTEXT - 1) // CONTEXT + 1

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.ids is None:  # opened in the process that reads
            self.ids = np.memmap(self.path, dtype=np.uint16, mode="r")
        w = torch.from_numpy(self.ids[i * CONTEXT:i * CONTEXT + CONTEXT + 1].astype(np.int64))
        return w[:-1], w[1:]


def loading_rate(batches, count):
    """Samples/s over `count` batches of the endless iterator `batches`, after its first."""
    next(batches)
    start = time.perf_counter()
    samples = 0
    for _ in range(count):
        samples += len(next(batches)[1])
    return samples / (time.perf_counter() - start)


def dataloader_batches(dataset, workers):
    loader = DataLoader(dataset, batch_size=BATCH, shuffle=True, num_workers=workers,
                        persistent_workers=workers > 0)
    while True:
        yield from loader


def nanogpt_batches(path):
    """nanoGPT's get_batch: random offsets into a memmap made anew for every batch."""
    while True:
        data = np.memmap(path, dtype=np.uint16, mode="r")
        ix = torch.randint(len(data) - CONTEXT, (BATCH,))
        x = torch.stack([torch.from_numpy(data[i:i + CONTEXT].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + CONTEXT].astype(np.int64)) for i in ix])
        yield x, y


def section_dataloader(args, tmp):
    images, corpus = data_once(args, tmp)
    model = trivial_model(tmp)
    steps = 100 if args.quick else 2000
    batches = 50 if args.quick else 1000
    print(f"\n== dataloader: loading alone, batch {BATCH}, samples/s (median of {args.repeat} runs); "
          "load only: batch / data phase, the loading by itself, where the step loads its own batch")
    print(f"{'data':<7} {'loader':<40} {'threads':>8} {'samples/s':>10} {'data share':>11} {'load only':>10}")
    rates, alone = {}, {}
    for name, path, dataset in (("images", images, PngFolder(images)), ("tokens", corpus, TokenWindows(corpus))):
        recipe = CNN if name == "images" else GPT
        for threads in (0, 1, 2):
            run = median_run(args, tmp, recipe, [
                f"data.train.path={path}", f"data.loader_threads={threads}", f"model.torchscript={model}",
                "model.loss=model", "distributed.nproc_per_node=1"] + traced(steps, steps // 4 + 1), 1)
            rates["bagua", name, threads] = run.samples_per_s(1)
            _, _, data_ms, part = run.trace(1)
            if threads == 0:
                alone[name] = BATCH / data_ms * 1000
            print(f"{name:<7} {'bagua, 1 worker, one-parameter model':<40} {threads:>8} "
                  f"{rates['bagua', name, threads]:10.0f} {100 * part:10.1f}% "
                  + (f"{alone[name]:10.0f}" if threads == 0 else f"{'':>10}"), flush=True)
        label = "torch DataLoader" + (", pure-Python PNG decode" if name == "images" else ", numpy.memmap")
        for workers in (0, 1, 2):
            rates["torch", name, workers] = sorted(loading_rate(dataloader_batches(dataset, workers), batches)
                                                   for _ in range(args.repeat))[args.repeat // 2]
            print(f"{name:<7} {label:<40} {workers:>8} {rates['torch', name, workers]:10.0f}", flush=True)
        if name == "tokens":
            rate = sorted(loading_rate(nanogpt_batches(path), batches) for _ in range(args.repeat))[args.repeat // 2]
            print(f"{name:<7} {'nanoGPT get_batch (in process)':<40} {0:>8} {rate:10.0f}")
    for name in ("images", "tokens"):
        bagua = max(rates["bagua", name, t] for t in (0, 1, 2))
        torch_best = max(rates["torch", name, w] for w in (0, 1, 2))
        print(f"verdict {name}: bagua's best run {bagua:.0f} samples/s against the DataLoader's best "
              f"{torch_best:.0f} ({bagua / torch_best:.1f}x); in the training thread alone "
              f"(bagua's load only at 0 threads, the DataLoader at num_workers 0): "
              f"{alone[name]:.0f} against {rates['torch', name, 0]:.0f} ({alone[name] / rates['torch', name, 0]:.1f}x)")


SECTIONS = {"rss": section_rss, "loader": section_loader, "dataloader": section_dataloader}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sections", nargs="*", metavar="SECTION", help="rss, loader, dataloader (default: all)")
    parser.add_argument("--bagua", default=os.path.join(ROOT, "build", "cli", "bagua"))
    parser.add_argument("--quick", action="store_true", help="tiny sizes, a smoke test; the figures mean nothing")
    parser.add_argument("--repeat", type=int, help="runs per bagua configuration (default 3, 1 with --quick)")
    args = parser.parse_args()
    args.bagua = os.path.abspath(args.bagua)
    args.repeat = args.repeat or (1 if args.quick else 3)
    names = args.sections or list(SECTIONS)
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        parser.error(f"no section {', '.join(unknown)}; there are {', '.join(SECTIONS)}")
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start; bagua: {args.bagua}"
          + (" (--quick: the figures mean nothing)" if args.quick else ""))
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bagua-streamed-bench-") as tmp:
        for name in names:
            SECTIONS[name](args, tmp)
    print(f"\n{time.monotonic() - start:.0f}s, load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
