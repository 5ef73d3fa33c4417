#!/usr/bin/env python3
"""The disk's floor for a state store commit: one write and one fdatasync.

Usage: scripts/fsync-floor.py [DIR] [--commits N] [--bytes B] [--gap-ms G] [--rounds R]

Writes N commits of B bytes each to a file in DIR (default: the current folder), each
followed by fdatasync and then a pause of G ms (the state writer commits at most every
5 ms), in two ways taking turns for R rounds:

- append: the file grows with every commit (its size and blocks change, so the sync
  writes metadata too, and on a journaling file system commits the journal);
- ahead: the commit overwrites zeros written and synced beforehand (the file keeps its
  size and blocks), as the store's log does for small commits.

Prints the median and 99th percentile of a commit's latency and this process's CPU time
(user + system) per commit. The file is deleted at the end.
"""

import argparse
import os
import resource
import statistics
import time


def cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run(directory, commits, size, gap, ahead):
    path = os.path.join(directory, "fsync-floor.tmp")
    fd = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
    try:
        if ahead:
            zeros = b"\0" * (1 << 20)
            for _ in range(commits * size // len(zeros) + 1):
                os.write(fd, zeros)
            os.fsync(fd)
        data = b"x" * size
        latencies = []
        cpu = 0.0
        for i in range(commits):
            before_cpu = cpu_seconds()
            start = time.perf_counter()
            os.pwrite(fd, data, i * size)
            os.fdatasync(fd)
            latencies.append(time.perf_counter() - start)
            cpu += cpu_seconds() - before_cpu
            if gap:
                time.sleep(gap)
    finally:
        os.close(fd)
        os.unlink(path)
    latencies.sort()
    return (
        statistics.median(latencies) * 1e3,
        latencies[len(latencies) * 99 // 100] * 1e3,
        cpu / commits * 1e6,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", nargs="?", default=".")
    parser.add_argument("--commits", type=int, default=400)
    parser.add_argument("--bytes", type=int, default=35_000)
    parser.add_argument("--gap-ms", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(
        f"{args.dir}: {args.commits} commits of {args.bytes} bytes, "
        f"{args.gap_ms} ms apart"
    )
    print("| round | way | latency p50 ms | latency p99 ms | CPU µs/commit |")
    print("|---|---|---|---|---|")
    for round_ in range(1, args.rounds + 1):
        for ahead in (False, True):
            p50, p99, cpu = run(
                args.dir, args.commits, args.bytes, args.gap_ms / 1e3, ahead
            )
            way = "ahead" if ahead else "append"
            print(f"| {round_} | {way} | {p50:.3f} | {p99:.3f} | {cpu:.0f} |")


if __name__ == "__main__":
    main()
