#!/usr/bin/env python3
"""The fio side-by-side table of a tests/fio-bench.sh guest log (tests/qemu/cases/fio-bench.sh):
`@@BENCH <label> <json>` (nvme-perf --json), `@@FIO <label> <json>` (fio --output-format=json)
and `@@PEER <label> <line>` .. `@@PEER-END <label> rc=N` (t/io_uring's per-second lines).
Prints IOPS medians and ranges of every program at QD1 and QD128, and the medians (ranges) of
per-repetition ratios: ours through fio against SPDK's fio plugin (when the boot ran it: rows
`fio-spdk-qd*`), the cost of going through fio on our driver (nvme-perf / fio + our engine)
and on the kernel's (t/io_uring / fio io_uring), with the issue's rule (ours may not cost more
than fio's io_uring engine costs over t/io_uring), and the same costs as the time fio adds
per I/O (a ratio grows with the speed of the program it divides; the added time does
not).
Usage: fio-bench-report.py LOG [--command CMD] [--host-load TEXT]... [--update DOC]"""
import json
import re
import statistics
import sys

BEGIN = "<!-- fio-bench:begin -->"
END = "<!-- fio-bench:end -->"
HEADING = "## fio: our engine against io_uring and nvme-perf"

PROGRAMS = [
    ("perf", "nvme-perf (ours, spdk-like engine)", "vfio-pci"),
    ("fio-ours", "fio + nvme-fio.so (our engine)", "vfio-pci"),
    ("fio-spdk", "fio + SPDK's spdk_nvme plugin", "vfio-pci"),
    ("fio-uring", "fio io_uring (hipri, fixedbufs, registerfiles)", "kernel nvme, polled"),
    ("t-uring", "t/io_uring (-p1 -B1 -F1 -O1)", "kernel nvme, polled"),
    ("perf-uring", "nvme-perf --engine io_uring --iopoll", "kernel nvme, polled"),
]


def t_uring_iops(lines):
    """Mean of t/io_uring's per-second `IOPS=N[K|M], ...` lines, the first second left out
    when there are at least three (it holds the start-up)."""
    vals = []
    for line in lines:
        m = re.match(r"\s*IOPS=([\d.]+)([KM]?),", line)
        if m:
            scale = {"": 1, "K": 1e3, "M": 1e6}[m.group(2)]
            vals.append(float(m.group(1)) * scale)
    if len(vals) >= 3:
        vals = vals[1:]
    return statistics.mean(vals) if vals else None


def load(path):
    """IOPS by label, one entry per run in log order (None for a failed run)."""
    runs = {}
    peer_out = {}
    with open(path, errors="replace") as f:
        for line in f:
            m = re.search(r"@@BENCH (\S+) (\{.*\})\s*$", line)
            if m:
                runs.setdefault(m.group(1), []).append(json.loads(m.group(2)).get("iops"))
                continue
            m = re.search(r"@@FIO (\S+) (\{.*\})\s*$", line)
            if m:
                try:
                    job = json.loads(m.group(2))["jobs"][0]
                    iops = job["read"]["iops"] if job.get("error", 0) == 0 else None
                except (ValueError, KeyError, IndexError):
                    iops = None
                runs.setdefault(m.group(1), []).append(iops)
                continue
            m = re.search(r"@@PEER-END (\S+) rc=(\d+)", line)
            if m:
                lines = peer_out.pop(m.group(1), [])
                iops = t_uring_iops(lines) if m.group(2) == "0" else None
                if iops is None:
                    print(f"fio-bench-report: {m.group(1)} gave no result:", file=sys.stderr)
                    for out in lines[-10:]:
                        print(f"    {out}", file=sys.stderr)
                runs.setdefault(m.group(1), []).append(iops)
                continue
            m = re.search(r"@@PEER (\S+) ?(.*?)\s*$", line)
            if m:
                peer_out.setdefault(m.group(1), []).append(m.group(2))
    return runs


def fmt(v):
    return "n/a" if v is None else f"{v:,.0f}"


def spread(vals, digits=0, suffix=""):
    ok = [v for v in vals if v is not None]
    if not ok:
        return "n/a", "n/a"
    med = statistics.median(ok)
    f = (lambda v: f"{v:,.{digits}f}{suffix}")
    return f(med), f"{f(min(ok))} .. {f(max(ok))}"


def ratios(runs, num, den):
    """Per-repetition ratios num/den (the runs of one repetition are paired by position)."""
    return [a / b for a, b in zip(runs.get(num, []), runs.get(den, [])) if a and b]


def added_us(runs, base, via):
    """Per-repetition microseconds per I/O that going through fio adds (one job, one CPU)."""
    return [1e6 / v - 1e6 / b for b, v in zip(runs.get(base, []), runs.get(via, [])) if b and v]


def report(runs, command, loads):
    out = []
    if command:
        out.append(f"Command: `{command}`")
        out.append("")
    for text in loads:
        out.append(f"Host load {text}")
        out.append("")
    out.append("| program | path | QD | IOPS (median) | range | runs |")
    out.append("|---|---|---:|---:|---|---:|")
    for qd in ("1", "128"):
        for key, name, path in PROGRAMS:
            vals = runs.get(f"{key}-qd{qd}", [])
            if not vals:
                continue
            med, rng = spread(vals)
            n = sum(v is not None for v in vals)
            out.append(f"| {name} | {path} | {qd} | {med} | {rng} | {n}/{len(vals)} |")
    out.append("")
    out.append("| ratio of IOPS, per repetition | QD | median | range |")
    out.append("|---|---:|---:|---|")
    rows = [
        ("cost of fio, ours: nvme-perf / fio + our engine", "perf", "fio-ours"),
        ("cost of fio, kernel: t/io_uring / fio io_uring", "t-uring", "fio-uring"),
        ("fio + our engine / fio io_uring", "fio-ours", "fio-uring"),
        ("fio + our engine / fio + SPDK's plugin", "fio-ours", "fio-spdk"),
        ("nvme-perf / nvme-perf --engine io_uring", "perf", "perf-uring"),
        ("nvme-perf --engine io_uring / t/io_uring", "perf-uring", "t-uring"),
    ]
    verdicts = []
    for qd in ("1", "128"):
        for text, num, den in rows:
            rs = ratios(runs, f"{num}-qd{qd}", f"{den}-qd{qd}")
            if rs:
                med, rng = spread(rs, 2, "x")
                out.append(f"| {text} | {qd} | {med} | {rng} |")
    out.append("")
    out.append("| time fio adds per I/O, per repetition (1/IOPS through fio - 1/IOPS without) "
               "| QD | median | range |")
    out.append("|---|---:|---:|---|")
    for qd in ("1", "128"):
        for text, base, via in (("ours: fio + our engine - nvme-perf", "perf", "fio-ours"),
                                ("kernel: fio io_uring - t/io_uring", "t-uring", "fio-uring")):
            added = added_us(runs, f"{base}-qd{qd}", f"{via}-qd{qd}")
            if added:
                med, rng = spread(added, 1, " µs")
                out.append(f"| {text} | {qd} | {med} | {rng} |")
        ours = ratios(runs, f"perf-qd{qd}", f"fio-ours-qd{qd}")
        kern = ratios(runs, f"t-uring-qd{qd}", f"fio-uring-qd{qd}")
        if ours and kern:
            a, b = statistics.median(ours), statistics.median(kern)
            ok = "holds" if a <= b else "broken"
            verdicts.append(f"QD{qd}: going through fio costs us {a:.2f}x, the kernel path "
                            f"{b:.2f}x: the rule (ours <= kernel's) {ok}.")
    out.append("")
    out.extend(verdicts)
    return "\n".join(out)


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    log = args[0]

    def opt(name):
        return [args[i + 1] for i, a in enumerate(args) if a == name and i + 1 < len(args)]

    command = (opt("--command") or [None])[0]
    update = (opt("--update") or [None])[0]
    runs = load(log)
    if not runs:
        sys.exit(f"fio-bench-report: no results in {log}")
    text = report(runs, command, opt("--host-load"))
    print(text)
    if update:
        doc = open(update).read()
        block = f"{BEGIN}\n{text}\n{END}"
        if BEGIN in doc and END in doc:
            doc = doc[: doc.index(BEGIN)] + block + doc[doc.index(END) + len(END):]
        else:
            doc = doc.rstrip() + f"\n\n{HEADING}\n\n" + block + "\n"
        open(update, "w").write(doc)


if __name__ == "__main__":
    main()
