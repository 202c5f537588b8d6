#!/usr/bin/env python3
"""Medians and per-repetition ratios of a tests/qd-ab.sh guest log (labels ours-, base-, spdk-,
libvfn- at qd1 and qd128). Usage: ab-report.py LOG"""
import os
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


main()
