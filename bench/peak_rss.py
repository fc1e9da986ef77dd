#!/usr/bin/python3
"""Peak resident memory of `bagua run`'s launcher and of each worker.

    /usr/bin/python3 bench/peak_rss.py [--bagua BINARY]... [--recipe R] [--set key=value]...

Runs the recipe (default: the quickstart, recipes/fashion-mnist-mlp.yaml,
for one epoch) with each given bagua binary in turn (default: this tree's
build/cli/bagua; give an older build to compare), polls /proc/PID/status
of the launcher and its children (the workers) every 20 ms, and prints the
launcher's and the largest worker's peak resident set (VmHWM) and peak
private memory (RssAnon: the resident set less the file-backed pages of
LibTorch's libraries, which the workers of a machine share). The same
method for every binary, so the figures compare side by side.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def status_of(pid):
    """(VmHWM, RssAnon, PPid) of a process, bytes; None when it is gone."""
    try:
        fields = {}
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields[key] = value.split()
        return int(fields["VmHWM"][0]) * 1024, int(fields["RssAnon"][0]) * 1024, int(fields["PPid"][0])
    except (OSError, KeyError, IndexError, ValueError):
        return None


def family(root):
    """The launcher and its children (the workers)."""
    pids = [root]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            s = status_of(int(entry))
            if s and s[2] == root:
                pids.append(int(entry))
    return pids


def poll(proc):
    """Polls the launcher `proc` and its children every 20 ms until it
    exits: ({pid: peak VmHWM}, {pid: peak RssAnon}), bytes."""
    hwm, anon = {}, {}
    while proc.poll() is None:
        for pid in family(proc.pid):
            s = status_of(pid)
            if s is not None:
                hwm[pid] = max(hwm.get(pid, 0), s[0])
                anon[pid] = max(anon.get(pid, 0), s[1])
        time.sleep(0.02)
    return hwm, anon


def measure(binary, recipe, sets):
    out = tempfile.mkdtemp(prefix="bagua-rss-")
    cmd = [binary, "run", recipe, "--set", f"output.dir={out}"]
    for s in sets:
        cmd += ["--set", s]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    hwm, anon = poll(proc)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed with exit code {proc.returncode}")
    launcher = (hwm.pop(proc.pid, 0), anon.pop(proc.pid, 0))
    workers = (max(hwm.values(), default=0), max(anon.values(), default=0))
    return launcher, workers


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bagua", action="append", help="a bagua binary (repeatable)")
    p.add_argument("--recipe", default=os.path.join(ROOT, "recipes", "fashion-mnist-mlp.yaml"))
    p.add_argument("--set", action="append", default=["train.epochs=1"], dest="sets")
    args = p.parse_args()
    binaries = [os.path.abspath(b) for b in (args.bagua or [os.path.join(ROOT, "build", "cli", "bagua")])]
    print("peak RSS (VmHWM) and peak private memory (RssAnon, what is not shared library pages), MiB")
    print(f"{'binary':<40}{'launcher RSS':>14}{'private':>9}{'worker RSS':>12}{'private':>9}")
    mib = 2**20
    for b in binaries:
        (l_hwm, l_anon), (w_hwm, w_anon) = measure(b, args.recipe, args.sets)
        print(f"{b:<40}{l_hwm / mib:>14.0f}{l_anon / mib:>9.0f}{w_hwm / mib:>12.0f}{w_anon / mib:>9.0f}")


if __name__ == "__main__":
    main()
