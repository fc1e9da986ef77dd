#!/usr/bin/python3
"""Writes an image folder in torchvision's ImageFolder layout from the real
Fashion-MNIST set (Debian's dataset-fashion-mnist):

  OUT/fashion-images/{train,val}/CLASS/NNNNN.png
      28x28 8-bit grayscale PNGs (--rgb: 8-bit RGB, the gray value in each
      channel). train comes from the train-* IDX files, val from t10k-*;
      NNNNN is the image's index in its IDX file. CLASS is "k-name"
      (0-t-shirt .. 9-ankle-boot), so the folders sort in label order.
      Each class holds its first --train-per-class (default 200) and
      --val-per-class (default 50) images in file order.
  OUT/fashion-images/manifest.json
      the options used, the classes and the image counts.

The PNGs come from the small writer below (no PIL). The folder is built
beside its place and renamed into it, so an interrupted run leaves the old
one (or none). OUT is recipes/data unless --out says otherwise. A run whose
manifest is newer than this script and has the same options does nothing.
The outputs are not committed; rerun with:
  /usr/bin/python3 scripts/make_image_folder.py [--train-per-class N] [--val-per-class M] [--rgb] [--force] [--out DIR]
"""
import argparse
import gzip
import json
import os
import shutil
import signal
import struct
import sys
import tempfile
import time
import zlib

SRC = "/usr/share/datasets/fashion-mnist"
CLASSES = ("0-t-shirt", "1-trouser", "2-pullover", "3-dress", "4-coat",
           "5-sandal", "6-shirt", "7-sneaker", "8-bag", "9-ankle-boot")
SPLITS = (("train", "train"), ("val", "t10k"))  # folder name, IDX file prefix
SIDE = 28


def read_labels(prefix):
    with gzip.open(os.path.join(SRC, f"{prefix}-labels-idx1-ubyte.gz"), "rb") as f:
        magic, count = struct.unpack(">II", f.read(8))
        if magic != 0x801:
            raise ValueError(f"{f.name}: not an IDX label file")
        return f.read(count)


def read_images(prefix, count):
    """The first `count` images of the IDX file, each as SIDE*SIDE bytes."""
    with gzip.open(os.path.join(SRC, f"{prefix}-images-idx3-ubyte.gz"), "rb") as f:
        magic, total, rows, cols = struct.unpack(">IIII", f.read(16))
        if magic != 0x803 or (rows, cols) != (SIDE, SIDE) or count > total:
            raise ValueError(f"{f.name}: not an IDX file of {count}+ {SIDE}x{SIDE} images")
        data = f.read(count * SIDE * SIDE)
    size = SIDE * SIDE
    return [data[i * size:(i + 1) * size] for i in range(count)]


def png_chunk(kind, data):
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))


def encode_png(pixels, width, height, channels):
    """An 8-bit PNG, gray (channels 1) or RGB (3), rows unfiltered."""
    color_type = {1: 0, 3: 2}[channels]
    stride = width * channels
    raw = b"".join(b"\0" + pixels[y * stride:(y + 1) * stride] for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header)
            + png_chunk(b"IDAT", zlib.compress(raw, 9)) + png_chunk(b"IEND", b""))


def gray_to_rgb(pixels):
    out = bytearray(len(pixels) * 3)
    for c in range(3):
        out[c::3] = pixels
    return bytes(out)


def pick(labels, per_class):
    """The indices of the first `per_class` images of each class."""
    taken = {k: [] for k in range(len(CLASSES))}
    for index, label in enumerate(labels):
        if len(taken[label]) < per_class:
            taken[label].append(index)
    short = [CLASSES[k] for k, idx in taken.items() if len(idx) < per_class]
    if short:
        raise ValueError(f"fewer than {per_class} images of {', '.join(short)}")
    return sorted(i for idx in taken.values() for i in idx)


def write_split(folder, prefix, per_class, rgb):
    labels = read_labels(prefix)
    chosen = pick(labels, per_class)
    images = read_images(prefix, chosen[-1] + 1) if chosen else []
    for name in CLASSES:
        os.makedirs(os.path.join(folder, name))
    for index in chosen:
        pixels = gray_to_rgb(images[index]) if rgb else images[index]
        path = os.path.join(folder, CLASSES[labels[index]], f"{index:05d}.png")
        with open(path, "wb") as f:
            f.write(encode_png(pixels, SIDE, SIDE, 3 if rgb else 1))
    return len(chosen)


def replace_dir(new, final):
    """Renames `new` to `final`, moving an old `final` aside first."""
    old = None
    if os.path.exists(final):
        old = tempfile.mkdtemp(prefix=".old-", dir=os.path.dirname(final))
        os.replace(final, os.path.join(old, "x"))
    os.replace(new, final)
    if old:
        shutil.rmtree(old)


def is_current(manifest_path, options):
    try:
        if os.path.getmtime(manifest_path) <= os.path.getmtime(os.path.abspath(__file__)):
            return False
        with open(manifest_path) as f:
            return json.load(f).get("options") == options
    except (OSError, ValueError):
        return False


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(root, "recipes", "data"), help="output folder")
    parser.add_argument("--train-per-class", type=int, default=200, metavar="N")
    parser.add_argument("--val-per-class", type=int, default=50, metavar="M")
    parser.add_argument("--rgb", action="store_true", help="8-bit RGB instead of grayscale")
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    args = parser.parse_args()
    if args.train_per_class < 0 or args.val_per_class < 0:
        parser.error("per-class counts must not be negative")

    final = os.path.join(args.out, "fashion-images")
    manifest_path = os.path.join(final, "manifest.json")
    options = {"train_per_class": args.train_per_class, "val_per_class": args.val_per_class,
               "rgb": args.rgb}
    if not args.force and is_current(manifest_path, options):
        print(f"up to date: {final} (--force rebuilds)")
        return 0

    start = time.monotonic()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # clean up as on ^C
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".fashion-images.", dir=args.out)
    try:
        counts = {}
        per_class = {"train": args.train_per_class, "val": args.val_per_class}
        for split, prefix in SPLITS:
            counts[split] = write_split(os.path.join(work, split), prefix, per_class[split], args.rgb)
        manifest = {"options": options, "source": SRC, "classes": list(CLASSES),
                    "size": [SIDE, SIDE], "channels": 3 if args.rgb else 1, "images": counts}
        with open(os.path.join(work, "manifest.json"), "w") as f:
            f.write(json.dumps(manifest, indent=2) + "\n")
        os.chmod(work, 0o755)  # mkdtemp made it 0700
        replace_dir(work, final)
    except ValueError as e:  # a bad source file, or too few images of a class
        shutil.rmtree(work, ignore_errors=True)
        print(f"error: {e}", file=sys.stderr)
        return 1
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    print(f"{len(CLASSES)} classes, {counts['train']} train / {counts['val']} val "
          f"{'RGB' if args.rgb else 'gray'} images in {time.monotonic() - start:.2f}s: {final}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
