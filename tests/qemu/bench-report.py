#!/usr/bin/env python3
"""Turns the `@@BENCH <label> <json>` lines of a bench.sh guest log into a Markdown table of
medians and ratios. Usage: bench-report.py LOG [--update docs/performance.md] [--command CMD]"""
import json
import re
import statistics
import sys

BEGIN = "<!-- qemu-bench:begin -->"
END = "<!-- qemu-bench:end -->"


def load(path):
    runs = {}
    pattern = re.compile(r"@@BENCH (\S+) (\{.*\})\s*$")
    with open(path, errors="replace") as f:
        for line in f:
            m = pattern.search(line)
            if m:
                runs.setdefault(m.group(1), []).append(json.loads(m.group(2)))
    return runs


def med(runs, label, key):
    vals = []
    for r in runs.get(label, []):
        v = r
        for k in key.split("."):
            v = v.get(k) if isinstance(v, dict) else None
        if isinstance(v, (int, float)):
            vals.append(v)
    return statistics.median(vals) if vals else None


def fmt(v, digits=0):
    if v is None:
        return "n/a"
    return f"{v:,.{digits}f}"


def ratio(a, b):
    return f"{a / b:.2f}x" if a and b else "n/a"


def report(runs, command):
    out = []
    n = max((len(v) for v in runs.values()), default=0)
    out.append(f"Medians of {n} repetitions (alternating order), 4 KiB random read, one vCPU.\n")
    out.append("| run | IOPS (median) | avg latency µs | p99 µs | MMIO doorbell writes / I/O | runs |")
    out.append("|---|---:|---:|---:|---:|---:|")
    for label in sorted(runs):
        out.append(
            f"| {label} | {fmt(med(runs, label, 'iops'))} | {fmt(med(runs, label, 'lat_ns.avg') and med(runs, label, 'lat_ns.avg') / 1000, 1)}"
            f" | {fmt(med(runs, label, 'lat_ns.p.99') and med(runs, label, 'lat_ns.p.99') / 1000, 1)}"
            f" | {fmt(med(runs, label, 'mmio_writes_per_io'), 3)} | {len(runs[label])} |"
        )
    out.append("")
    o128, k128 = med(runs, "ours-qd128", "iops"), med(runs, "uring-polled-qd128", "iops")
    ki128 = med(runs, "uring-irq-qd128", "iops")
    o1, k1 = med(runs, "ours-qd1", "lat_ns.avg"), med(runs, "uring-polled-qd1", "lat_ns.avg")
    ki1 = med(runs, "uring-irq-qd1", "lat_ns.avg")
    out.append("| comparison | ratio |")
    out.append("|---|---:|")
    out.append(f"| QD128 IOPS: ours / kernel io_uring polled | {ratio(o128, k128)} |")
    out.append(f"| QD128 IOPS: ours / kernel io_uring interrupts | {ratio(o128, ki128)} |")
    out.append(f"| QD1 avg latency: kernel io_uring polled / ours (>1: ours is faster) | {ratio(k1, o1)} |")
    out.append(f"| QD1 avg latency: kernel io_uring interrupts / ours | {ratio(ki1, o1)} |")
    for label, what in [
        ("ours-qd128-no-request-cache", "request cache"),
        ("ours-qd128-no-batch-prefetch", "batched tag prefetch"),
        ("ours-qd128-no-shadow-doorbells", "shadow doorbells"),
        ("ours-qd128-interrupts", "polling vs hybrid interrupts (QD128)"),
    ]:
        off = med(runs, label, "iops")
        out.append(f"| A/B {what}: IOPS with it / without it | {ratio(o128, off)} |")
    out.append("")
    if command:
        out.append(f"Reproduce: `{command}`\n")
    return "\n".join(out)


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    log = args[0]
    update = args[args.index("--update") + 1] if "--update" in args else None
    command = args[args.index("--command") + 1] if "--command" in args else None
    runs = load(log)
    if not runs:
        sys.exit(f"no @@BENCH lines in {log}")
    text = report(runs, command)
    print(text)
    if update:
        doc = open(update).read() if __import__("os").path.exists(update) else "# Performance\n"
        block = f"{BEGIN}\n{text}\n{END}"
        if BEGIN in doc and END in doc:
            doc = doc[: doc.index(BEGIN)] + block + doc[doc.index(END) + len(END):]
        else:
            doc = doc.rstrip() + "\n\n## QEMU guest: our driver vs the kernel's io_uring\n\n" + block + "\n"
        open(update, "w").write(doc)


if __name__ == "__main__":
    main()
