#!/usr/bin/python3
"""The Redis dataset cache (data.cache), cold against warm against none.

    /usr/bin/python3 bench/cache.py [--bagua BINARY] [--copies N] [--epochs E]

Writes a JSONL set of N copies of the shipped token set
(recipes/data/fashion-tokens-train.jsonl, 1,500 lines each; default 40:
60,000 samples), starts a redis-server of its own (a free port, a
password, no persistence), and trains recipes/fashion-tokens-jsonl.yaml on
it three times, 2 workers, E epochs (default 1), no evaluation:
  none   no data.cache
  cold   data.cache on that server, still empty (every sample decoded
         and written)
  warm   the same again (every sample read from the cache)
For each it prints the run's wall time, the training time at the first
metrics record (step 20; the clock starts after the set is loaded), and
the largest worker's peak RSS. Every source
is loaded whole at start today, so a warm cache saves only the per-batch
decoding of samples that are already in memory (docs/data.md, Redis cache).
"""
import argparse
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(port, password):
    config = (f"port {port}\nbind 127.0.0.1\nrequirepass {password}\nsave \"\"\nappendonly no\n"
              "maxmemory 2gb\nmaxmemory-policy allkeys-random\n")
    server = subprocess.Popen(["redis-server", "-"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    server.stdin.write(config.encode())
    server.stdin.close()
    for _ in range(500):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                s.sendall(f"AUTH {password}\r\nPING\r\n".encode())
                if b"PONG" in s.recv(100):
                    return server
        except OSError:
            pass
        time.sleep(0.02)
    server.kill()
    sys.exit("redis-server did not start")


def run(bagua, recipe, out, extra, env):
    start = time.monotonic()
    proc = subprocess.run([bagua, "run", recipe, "--set", f"output.dir={out}"] + extra, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"bagua run failed ({proc.returncode}):\n{proc.stdout[-3000:]}")
    first, rss = None, 0
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            record = json.loads(line)
            if first is None and "loss" in record:
                first = record.get("time")
            rss = max([rss] + list(record.get("peak_rss_bytes", [])))  # one per rank
    return wall, first, rss


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bagua", default=os.path.join(ROOT, "build", "cli", "bagua"))
    parser.add_argument("--copies", type=int, default=40)
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bagua-cache-bench-") as tmp:
        data = os.path.join(tmp, "tokens.jsonl")
        with open(os.path.join(ROOT, "recipes/data/fashion-tokens-train.jsonl")) as f:
            lines = f.read()
        with open(data, "w") as f:
            for _ in range(args.copies):
                f.write(lines)
        port, password = free_port(), secrets.token_hex(16)
        server = start_redis(port, password)
        try:
            env = dict(os.environ, BAGUA_REDIS_PASSWORD=password)
            recipe = os.path.join(ROOT, "recipes/fashion-tokens-jsonl.yaml")
            common = ["--set", f"data.train.path={data}", "--set", "data.eval=null",
                      "--set", f"train.epochs={args.epochs}", "--set", "train.log_every_steps=20"]
            cache = ["--set", "data.cache={dataset_name: bench, writer_buffer_size: 64, hosts: "
                              f"[{{host: 127.0.0.1, port: {port}}}]}}"]
            print(f"{args.copies * 1500} samples, 2 workers, {args.epochs} epoch(s)")
            print(f"{'run':6} {'wall s':>8} {'step 20 at s':>15} {'peak RSS MiB':>13}")
            for name, extra in (("none", []), ("cold", cache), ("warm", cache)):
                wall, first, rss = run(args.bagua, recipe, os.path.join(tmp, name), common + extra, env)
                first_text = f"{first:15.2f}" if isinstance(first, (int, float)) else f"{'?':>15}"
                print(f"{name:6} {wall:8.2f} {first_text} {rss / 2**20:13.0f}", flush=True)
        finally:
            server.kill()
            server.wait()


if __name__ == "__main__":
    main()
