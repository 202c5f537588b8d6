#!/usr/bin/env python3
"""Medians and per-repetition ratios of a tests/qd-ab.sh guest log (labels ours-, base-, spdk-,
libvfn- at qd1 and qd128), and the guest's context switches and interrupts a second of each
run (the case's `@@SCHED` lines). Usage: ab-report.py LOG"""
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
report = __import__("bench-report")


def main():
    runs = report.load(sys.argv[1])
    labels = sorted(runs)
    print("| run | IOPS (median) | IOPS of each run |")
    print("|---|---:|---|")
    for label in labels:
        vals = report.values(runs, label, "iops")
        ok = [v for v in vals if v is not None]
        med = statistics.median(ok) if ok else None
        print(f"| {label} | {report.fmt(med)} | {', '.join(report.fmt(v) for v in vals)} |")
    print()
    print("| ratio (IOPS) | median of per-repetition ratios |")
    print("|---|---|")
    for qd in ("qd1", "qd128"):
        for other in ("base", "spdk", "libvfn"):
            num, den = f"ours-{qd}", f"{other}-{qd}"
            if num in runs and den in runs:
                print(f"| {qd}: ours / {other} | {report.paired(runs, num, den, 'iops')} |")

    sched = load_sched(sys.argv[1])
    if sched:
        print()
        print("| run | context switches/s (median) | interrupts/s (median) | context switches/s of each run |")
        print("|---|---:|---:|---|")
        for label in sorted(sched):
            rates = [(c / t, i / t) for c, i, t in sched[label] if t > 0]
            if not rates:
                continue
            ctxt = statistics.median(r[0] for r in rates)
            intr = statistics.median(r[1] for r in rates)
            each = ", ".join(f"{r[0]:.0f}" for r in rates)
            print(f"| {label} | {ctxt:.0f} | {intr:.0f} | {each} |")


def load_sched(path):
    """`@@SCHED <label> ctxt=N intr=N secs=S` lines by label: a list of (ctxt, intr, secs)."""
    out = {}
    line_re = re.compile(r"@@SCHED (\S+) ctxt=(\d+) intr=(\d+) secs=([\d.]+)")
    with open(path, errors="replace") as f:
        for line in f:
            m = line_re.search(line)
            if m:
                out.setdefault(m.group(1), []).append(
                    (int(m.group(2)), int(m.group(3)), float(m.group(4))))
    return out


main()
