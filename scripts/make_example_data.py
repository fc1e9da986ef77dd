#!/usr/bin/python3
"""Writes the small data files of the CSV and JSONL example recipes, derived
from the real Fashion-MNIST set (Debian's dataset-fashion-mnist):

  recipes/data/fashion-thumbnails-{train,test}.csv
      7x7 thumbnails (4x4 averages of the 28x28 images), 49 columns p0..p48
      in [0, 1], then the label.
  recipes/data/fashion-tokens-{train,test}.jsonl
      {"tokens": [...], "label": k}: one token per thumbnail pixel that is not
      blank, token = 1 + 4 * position + (level - 1) with level 1..4 the pixel's
      quantized intensity; sequences have different lengths.

Only the standard library is used. The outputs are committed; rerun after
changing this script:  /usr/bin/python3 scripts/make_example_data.py
"""
import gzip
import json
import os
import struct
import sys

SRC = "/usr/share/datasets/fashion-mnist"
TRAIN, TEST = 3000, 1000


def read_idx(name, count):
    with gzip.open(os.path.join(SRC, name), "rb") as f:
        magic, n = struct.unpack(">II", f.read(8))
        if magic == 0x803:
            rows, cols = struct.unpack(">II", f.read(8))
            data = f.read(count * rows * cols)
            return [data[i * 784:(i + 1) * 784] for i in range(count)]
        return list(f.read(count))


def thumbnail(img):
    out = []
    for by in range(7):
        for bx in range(7):
            s = 0
            for y in range(4):
                for x in range(4):
                    s += img[(by * 4 + y) * 28 + bx * 4 + x]
            out.append(s / (16 * 255.0))
    return out


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out_dir = os.path.join(root, "recipes", "data")
    os.makedirs(out_dir, exist_ok=True)
    for split, images, labels, count in (("train", "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", TRAIN),
                                         ("test", "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", TEST)):
        imgs, labs = read_idx(images, count), read_idx(labels, count)
        thumbs = [thumbnail(img) for img in imgs]
        path = os.path.join(out_dir, f"fashion-thumbnails-{split}.csv")
        with open(path, "w") as f:
            f.write(",".join([f"p{i}" for i in range(49)] + ["label"]) + "\n")
            for t, lab in zip(thumbs, labs):
                f.write(",".join(f"{v:.3f}" for v in t) + f",{lab}\n")
        print(f"wrote {path}")
        path = os.path.join(out_dir, f"fashion-tokens-{split}.jsonl")
        with open(path, "w") as f:
            for t, lab in zip(thumbs, labs):
                tokens = [1 + 4 * pos + min(3, int(v * 4)) for pos, v in enumerate(t) if v >= 0.05]
                f.write(json.dumps({"tokens": tokens, "label": lab}) + "\n")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
