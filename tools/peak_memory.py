#!/usr/bin/env python3
"""Runs a command and reports its peak memory, split as the kernel counts it.

    tools/peak_memory.py [--interval S] -- COMMAND [ARGS...]

Prints, after the command ends, the peak of RssAnon (memory the process itself allocated: what
must fit in RAM), the peak of RssFile (pages of memory-mapped files it touched: the page cache,
which the kernel reclaims under pressure) and VmHWM (their sum's high-water mark, what `time -v`
calls maximum resident set size), sampled from /proc/PID/status every --interval seconds, and the
wall time. A model file read through mmap shows in RssFile up to its size however little the
process holds, so RssAnon is the figure to compare with the machine's memory.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time


def _status(pid: int) -> dict:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("RssAnon", "RssFile", "VmHWM"):
                    out[key] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--interval", type=float, default=0.2)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("give a command after --")
    start = time.monotonic()
    proc = subprocess.Popen(cmd)
    peak = {"RssAnon": 0, "RssFile": 0, "VmHWM": 0}
    while proc.poll() is None:
        for k, v in _status(proc.pid).items():
            peak[k] = max(peak[k], v)
        time.sleep(a.interval)
    wall = time.monotonic() - start
    gib = 1 << 30
    print(f"peak_memory: exit {proc.returncode}, wall {wall:.1f} s, peak RssAnon {peak['RssAnon'] / gib:.2f} GiB, "
          f"peak RssFile {peak['RssFile'] / gib:.2f} GiB, VmHWM {peak['VmHWM'] / gib:.2f} GiB", file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
