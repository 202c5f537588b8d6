#!/usr/bin/env python3
"""Turns the `@@BENCH <label> <json>` lines of a bench.sh guest log, and the `@@PEER <label> <line>`
output of the peer benchmarks (SPDK's spdk_nvme_perf, libvfn's examples/perf) closed by
`@@PEER-END <label> rc=N`, into a Markdown table of medians and ratios.
Usage: bench-report.py LOG [--update docs/performance.md] [--command CMD]"""
import json
import re
import statistics
import sys

BEGIN = "<!-- qemu-bench:begin -->"
END = "<!-- qemu-bench:end -->"


def parse_spdk(lines):
    """spdk_nvme_perf's summary: `Total : IOPS MiB/s avg min max` (latencies in µs)."""
    for line in lines:
        m = re.match(r"\s*Total\s*:\s*([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", line)
        if m:
            iops, _, avg, lo, hi = (float(x) for x in m.groups())
            return {"iops": iops, "lat_ns": {"avg": avg * 1000, "min": lo * 1000, "max": hi * 1000}}
    return None


def parse_libvfn(lines):
    """libvfn examples/perf: a header `iops mbps lavg lmin lmax`, then the values (µs)."""
    for head, vals in zip(lines, lines[1:]):
        if head.split() == ["iops", "mbps", "lavg", "lmin", "lmax"]:
            try:
                iops, _, avg, lo, hi = (float(x) for x in vals.split())
            except ValueError:
                return None
            return {"iops": iops, "lat_ns": {"avg": avg * 1000, "min": lo * 1000, "max": hi * 1000}}
    return None


PEER_PARSERS = {"spdk": parse_spdk, "libvfn": parse_libvfn}


def load(path):
    """Runs by label: the JSON of each @@BENCH line, and each finished peer run parsed into the
    same shape (iops, lat_ns.avg/min/max). A peer run that failed or printed no summary is
    reported on stderr and counted without numbers, so that repetitions stay paired."""
    runs = {}
    peer_out = {}
    bench = re.compile(r"@@BENCH (\S+) (\{.*\})\s*$")
    peer = re.compile(r"@@PEER (\S+) ?(.*?)\s*$")
    peer_end = re.compile(r"@@PEER-END (\S+) rc=(\d+)")
    with open(path, errors="replace") as f:
        for line in f:
            m = bench.search(line)
            if m:
                runs.setdefault(m.group(1), []).append(json.loads(m.group(2)))
                continue
            m = peer_end.search(line)
            if m:
                label, rc = m.group(1), int(m.group(2))
                lines = peer_out.pop(label, [])
                parser = PEER_PARSERS.get(label.split("-")[0])
                result = parser(lines) if parser and rc == 0 else None
                if result is None:
                    print(f"bench-report: peer run {label} (exit {rc}) gave no result; its output:",
                          file=sys.stderr)
                    for out in lines[-20:]:
                        print(f"    {out}", file=sys.stderr)
                    runs.setdefault(label, []).append({"failed": rc})
                else:
                    runs.setdefault(label, []).append(result)
                continue
            m = peer.search(line)
            if m:
                peer_out.setdefault(m.group(1), []).append(m.group(2))
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
    row("QD128 IOPS: ours with shadow doorbells forced on / kernel io_uring polled",
        "ours-qd128-shadow-doorbells", "uring-polled-qd128", "iops")
    row("QD128 IOPS, neither timing each I/O (--no-latency): ours / kernel io_uring polled",
        "ours-qd128-untimed", "uring-polled-qd128-untimed", "iops")
    row("QD128 IOPS: ours / kernel io_uring interrupts", "ours-qd128", "uring-irq-qd128", "iops")
    row("QD1 avg latency: kernel io_uring polled / ours (>1: ours is faster)",
        "ours-qd1", "uring-polled-qd1", "lat_ns.avg", invert=True)
    row("QD1 avg latency: kernel io_uring interrupts / ours",
        "ours-qd1", "uring-irq-qd1", "lat_ns.avg", invert=True)
    row("QD1 avg latency, interrupt mode: kernel io_uring interrupts / ours hybrid",
        "ours-qd1-interrupts", "uring-irq-qd1", "lat_ns.avg", invert=True)
    for peer, name in [("spdk", "SPDK spdk_nvme_perf"), ("libvfn", "libvfn examples/perf")]:
        if f"{peer}-qd128" not in runs and f"{peer}-qd1" not in runs:
            continue
        row(f"QD128 IOPS: ours / {name}", "ours-qd128", f"{peer}-qd128", "iops")
        row(f"QD1 IOPS: ours / {name}", "ours-qd1", f"{peer}-qd1", "iops")
        row(f"QD1 avg latency: {name} / ours (>1: ours is faster)",
            "ours-qd1", f"{peer}-qd1", "lat_ns.avg", invert=True)
    for with_it, without, what in [
        ("ours-qd128", "ours-qd128-no-request-cache", "request cache"),
        ("ours-qd128", "ours-qd128-no-batch-prefetch", "batched tag prefetch"),
        # Older logs ran the default with shadow doorbells and A/B'd them off.
        ("ours-qd128", "ours-qd128-no-shadow-doorbells", "shadow doorbells (QD128)"),
        ("ours-qd128-shadow-doorbells", "ours-qd128", "shadow doorbells forced on (QD128)"),
        ("ours-qd1-shadow-doorbells", "ours-qd1", "shadow doorbells forced on (QD1)"),
        ("ours-qd128", "ours-qd128-no-sgl", "SGL data pointers (QD128)"),
        ("ours-qd1", "ours-qd1-no-sgl", "SGL data pointers (QD1)"),
        ("ours-qd128", "ours-qd128-interrupts", "pure polling (vs hybrid interrupts, QD128)"),
    ]:
        if with_it in runs and without in runs:
            row(f"A/B {what}: IOPS with it / without it", with_it, without, "iops")
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
