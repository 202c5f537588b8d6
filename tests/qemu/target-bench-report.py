#!/usr/bin/env python3
"""Reduces the log of tests/qemu/cases/target-bench.sh to a table: per side and queue depth the
IOPS, the latency (median and p99 of fio's total latency, lat_ns), the target's CPU per I/O and
I/Os per target CPU-second, each the median over the repetitions, and the ratios ours / kernel
(ratio of the medians). Markdown on stdout.

Usage: target-bench-report.py LOG [--command CMD]
"""
import json
import re
import statistics
import sys

USER_HZ = 100  # /proc/stat and /proc/PID/stat count in USER_HZ ticks (100 on x86 Linux)


def parse(path):
    runs = {}  # label -> list of dicts, in log order
    pending = {}
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\r\n")
            m = re.search(r"@@TB (\S+) (\{.*\})\s*$", line)
            if m:
                try:
                    job = json.loads(m.group(2))["jobs"][0]["read"]
                except (ValueError, KeyError, IndexError):
                    print(f"warning: unparsable fio output for {m.group(1)}", file=sys.stderr)
                    continue
                # Total latency (submission + completion): with io_uring on the kernel's
                # NVMe/TCP host much of a request may be done inside the submitting call.
                pct = job.get("lat_ns", {}).get("percentile", {})
                pending[m.group(1)] = {
                    "iops": job["iops"],
                    "ios": job["total_ios"],
                    "p50": pct.get("50.000000", 0) / 1000,
                    "p99": pct.get("99.000000", 0) / 1000,
                }
                continue
            m = re.search(r"@@TBCPU (\S+) target=(\d+) kworker=(\d+) busy=(\d+)", line)
            if m and m.group(1) in pending:
                r = pending.pop(m.group(1))
                r["target"] = int(m.group(2)) / USER_HZ
                r["kworker"] = int(m.group(3)) / USER_HZ
                r["busy"] = int(m.group(4)) / USER_HZ
                runs.setdefault(m.group(1), []).append(r)
    return runs


def med(vals):
    return statistics.median(vals) if vals else float("nan")


def per_io_us(r, key):
    return 1e6 * r[key] / r["ios"] if r["ios"] else float("nan")


def ios_per_cpu(r, key):
    return r["ios"] / r[key] if r[key] else float("nan")


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    cmd = None
    if "--command" in args:
        i = args.index("--command")
        cmd = args[i + 1]
        del args[i : i + 2]
    runs = parse(args[0])
    if not runs:
        sys.exit(f"no @@TB runs in {args[0]}")
    sides = [s for s in ("kernel", "ours", "sleep", "base") if f"{s}-qd1" in runs or f"{s}-qd128" in runs]
    if cmd:
        print(f"Command: `{cmd}`\n")
    print("| side | QD | reps | IOPS | lat p50 µs | lat p99 µs | target CPU µs/I/O | "
          "I/Os per target CPU-s | kworker µs/I/O | guest busy µs/I/O |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    summary = {}
    for qd in (1, 128):
        for s in sides:
            rs = runs.get(f"{s}-qd{qd}", [])
            if not rs:
                continue
            row = {
                "iops": med([r["iops"] for r in rs]),
                "p50": med([r["p50"] for r in rs]),
                "p99": med([r["p99"] for r in rs]),
                "tcpu": med([per_io_us(r, "target") for r in rs]),
                "eff": med([ios_per_cpu(r, "target") for r in rs]),
                "kw": med([per_io_us(r, "kworker") for r in rs]),
                "busy": med([per_io_us(r, "busy") for r in rs]),
            }
            summary[(s, qd)] = row
            print(f"| {s} | {qd} | {len(rs)} | {row['iops']:,.0f} | {row['p50']:,.0f} | "
                  f"{row['p99']:,.0f} | {row['tcpu']:,.1f} | {row['eff']:,.0f} | "
                  f"{row['kw']:,.1f} | {row['busy']:,.1f} |")
    print()
    for s in sides:
        if s == "kernel":
            continue
        for qd in (1, 128):
            a, k = summary.get((s, qd)), summary.get(("kernel", qd))
            if not a or not k:
                continue
            print(f"- {s} / kernel at QD{qd}: IOPS {a['iops'] / k['iops']:.2f}x, "
                  f"I/Os per target CPU-second {a['eff'] / k['eff']:.2f}x, "
                  f"latency p50 {a['p50'] / k['p50']:.2f}x, p99 {a['p99'] / k['p99']:.2f}x, "
                  f"guest busy CPU per I/O {a['busy'] / k['busy']:.2f}x")
            # The kworker figure of the kernel side also holds the host's own io_work; the
            # same host runs in our phase, where the kworkers are the host's alone.
            est = k["kw"] - a["kw"]
            if est > 0:
                print(f"  (kernel target estimate without the host's kworker share: "
                      f"{est:.1f} µs/I/O, ours {a['tcpu']:.1f}: "
                      f"{est / a['tcpu']:.2f}x in I/Os per target CPU-second)")


if __name__ == "__main__":
    main()
