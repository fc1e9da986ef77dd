#!/usr/bin/python3
"""Writes a byte-level token corpus (vocabulary 256) built from the text every
Debian machine has: /usr/share/common-licenses/* first, then
/usr/share/doc/*/copyright, each in sorted path order.

  OUT/bytes-train.bin, OUT/bytes-val.bin
      flat little-endian token ids (uint16 by default, --dtype uint32 for the
      wide path), one per byte of the corpus; the last 10% goes to val.
  OUT/bytes-corpus.json
      the options used, the token counts and how many source files were read.

The corpus is each file's bytes followed by b"\\n\\n", cut at --max-bytes
(default 4 MiB). Symlinks (files or doc folders) are skipped, so no text
counts twice; so are files that are not valid UTF-8 or hold a NUL byte.
OUT is recipes/data unless --out says otherwise. A run whose outputs are
newer than this script and were made with the same options does nothing.
The outputs are not committed; rerun with:
  /usr/bin/python3 scripts/make_token_corpus.py [--max-bytes N] [--dtype uint16|uint32] [--out DIR]
"""
import argparse
import glob
import json
import os
import stat
import sys
import time

SOURCES = ("/usr/share/common-licenses/*", "/usr/share/doc/*/copyright")
SEPARATOR = b"\n\n"
WIDTH = {"uint16": 2, "uint32": 4}


def source_paths():
    for pattern in SOURCES:
        for path in sorted(glob.glob(pattern)):
            parent = os.path.dirname(path)
            if os.path.islink(parent) or not stat.S_ISREG(os.lstat(path).st_mode):
                continue
            yield path


def build_corpus(max_bytes):
    """Returns (corpus bytes, number of files that went into it)."""
    parts, size, files = [], 0, 0
    for path in source_paths():
        if size >= max_bytes:
            break
        with open(path, "rb") as f:
            data = f.read()
        if b"\0" in data:
            continue
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        piece = (data + SEPARATOR)[:max_bytes - size]
        parts.append(piece)
        size += len(piece)
        files += 1
    return b"".join(parts), files


def encode(data, width):
    """Each byte as one little-endian token id of `width` bytes."""
    out = bytearray(len(data) * width)
    out[0::width] = data
    return bytes(out)


def write_atomic(path, data):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def up_to_date(outputs, meta_path, options):
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        script_time = os.path.getmtime(os.path.abspath(__file__))
        if any(os.path.getmtime(p) <= script_time for p in outputs):
            return False
    except (OSError, ValueError):
        return False
    return all(meta.get(k) == v for k, v in options.items())


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(root, "recipes", "data"), help="output folder")
    parser.add_argument("--max-bytes", type=int, default=4 * 1024 * 1024, help="corpus size cap")
    parser.add_argument("--dtype", choices=sorted(WIDTH), default="uint16", help="token id type")
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    args = parser.parse_args()
    if args.max_bytes < 1:
        parser.error("--max-bytes must be positive")

    train_path = os.path.join(args.out, "bytes-train.bin")
    val_path = os.path.join(args.out, "bytes-val.bin")
    meta_path = os.path.join(args.out, "bytes-corpus.json")
    options = {"max_bytes": args.max_bytes, "dtype": args.dtype}
    if not args.force and up_to_date((train_path, val_path, meta_path), meta_path, options):
        print(f"up to date: {train_path}, {val_path} (--force rebuilds)")
        return 0

    start = time.monotonic()
    corpus, files = build_corpus(args.max_bytes)
    if not corpus:
        print("no source text found under " + ", ".join(SOURCES), file=sys.stderr)
        return 1
    n_val = len(corpus) // 10
    n_train = len(corpus) - n_val
    width = WIDTH[args.dtype]
    os.makedirs(args.out, exist_ok=True)
    write_atomic(train_path, encode(corpus[:n_train], width))
    write_atomic(val_path, encode(corpus[n_train:], width))
    meta = dict(options, vocab_size=256, sources=files, tokens=len(corpus),
                train_tokens=n_train, val_tokens=n_val)
    write_atomic(meta_path, (json.dumps(meta, indent=2) + "\n").encode())
    print(f"{files} files, {n_train} train / {n_val} val {args.dtype} tokens "
          f"in {time.monotonic() - start:.2f}s: {train_path}, {val_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
