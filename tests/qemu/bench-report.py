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


def values(runs, label, key):
    out = []
    for r in runs.get(label, []):
        v = r
        for k in key.split("."):
            v = v.get(k) if isinstance(v, dict) else None
        out.append(v if isinstance(v, (int, float)) else None)
    return out


def paired(runs, num, den, key, invert=False):
    """Median and range of per-repetition ratios num/den (den/num with invert): runs of one
    repetition are minutes apart at most, so pairing them cancels much of the machine's drift."""
    rs = []
    for a, b in zip(values(runs, num, key), values(runs, den, key)):
        if a and b:
            rs.append(b / a if invert else a / b)
    if not rs:
        return "n/a"
    return f"{statistics.median(rs):.2f}x (range {min(rs):.2f}-{max(rs):.2f}, {len(rs)} pairs)"


def report(runs, command):
    out = []
    n = max((len(v) for v in runs.values()), default=0)
    out.append(f"Medians of {n} repetitions (alternating order), 4 KiB random read, one vCPU.\n")
    out.append("| run | IOPS (median) | avg latency µs | p99 µs | MMIO doorbell writes / I/O | IOPS of each run |")
    out.append("|---|---:|---:|---:|---:|---|")
    for label in sorted(runs):
        out.append(
            f"| {label} | {fmt(med(runs, label, 'iops'))} | {fmt(med(runs, label, 'lat_ns.avg') and med(runs, label, 'lat_ns.avg') / 1000, 1)}"
            f" | {fmt(med(runs, label, 'lat_ns.p.99') and med(runs, label, 'lat_ns.p.99') / 1000, 1)}"
            f" | {fmt(med(runs, label, 'mmio_writes_per_io'), 3)}"
            f" | {', '.join(fmt(v) for v in values(runs, label, 'iops'))} |"
        )
    out.append("")
    out.append("| comparison | ratio of medians | median of per-repetition ratios |")
    out.append("|---|---:|---|")

    def row(text, num, den, key, invert=False):
        a, b = med(runs, num, key), med(runs, den, key)
        whole = ratio(b, a) if invert else ratio(a, b)
        out.append(f"| {text} | {whole} | {paired(runs, num, den, key, invert)} |")

    row("QD128 IOPS: ours / kernel io_uring polled", "ours-qd128", "uring-polled-qd128", "iops")
    row("QD128 IOPS: ours without shadow doorbells / kernel io_uring polled",
        "ours-qd128-no-shadow-doorbells", "uring-polled-qd128", "iops")
    row("QD128 IOPS, neither timing each I/O (--no-latency): ours / kernel io_uring polled",
        "ours-qd128-untimed", "uring-polled-qd128-untimed", "iops")
    row("QD128 IOPS: ours / kernel io_uring interrupts", "ours-qd128", "uring-irq-qd128", "iops")
    row("QD1 avg latency: kernel io_uring polled / ours (>1: ours is faster)",
        "ours-qd1", "uring-polled-qd1", "lat_ns.avg", invert=True)
    row("QD1 avg latency: kernel io_uring interrupts / ours",
        "ours-qd1", "uring-irq-qd1", "lat_ns.avg", invert=True)
    row("QD1 avg latency, interrupt mode: kernel io_uring interrupts / ours hybrid",
        "ours-qd1-interrupts", "uring-irq-qd1", "lat_ns.avg", invert=True)
    for label, what in [
        ("ours-qd128-no-request-cache", "request cache"),
        ("ours-qd128-no-batch-prefetch", "batched tag prefetch"),
        ("ours-qd128-no-shadow-doorbells", "shadow doorbells"),
        ("ours-qd128-interrupts", "pure polling (vs hybrid interrupts, QD128)"),
    ]:
        row(f"A/B {what}: IOPS with it / without it", "ours-qd128", label, "iops")
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
