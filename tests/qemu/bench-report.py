#!/usr/bin/env python3
"""Turns the `@@BENCH <label> <json>` lines of a bench.sh guest log, and the `@@PEER <label> <line>`
output of the peer benchmarks (SPDK's spdk_nvme_perf, libvfn's examples/perf) closed by
`@@PEER-END <label> rc=N`, into a Markdown table of medians and ratios.
With --tcp, the log is one of tests/tcp-bench.sh (labels ours-, base-, kernel-irq-,
kernel-polled- at qd1 and qd128, and `@@STRACE <label> <line>` syscall counts closed by
`@@STRACE-END <label> ios=N`): the NVMe/TCP table, in its own block of the document.
A busy-host run (tests/bench.sh with BENCH_LOAD) has runs labelled `<label>-loaded`, made while
the host ran run.sh's --host-load hog, and the hog's `@@HOSTLOAD on|off` lines: every ratio is
then given quiet and loaded side by side, with the load named and the host's load averages.
Usage: bench-report.py LOG [--tcp] [--update docs/performance.md] [--command CMD]"""
import json
import re
import statistics
import sys

BEGIN = "<!-- qemu-bench:begin -->"
END = "<!-- qemu-bench:end -->"
TCP_BEGIN = "<!-- tcp-bench:begin -->"
TCP_END = "<!-- tcp-bench:end -->"


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


LOADED = "-loaded"


def load_host_events(path):
    """run.sh's `@@HOSTLOAD on|off procs=N nice=K host_cpus=C t=EPOCH loadavg=A,B,C` lines, in
    order, as dicts (loadavg as three floats)."""
    events = []
    with open(path, errors="replace") as f:
        for line in f:
            m = re.match(r"@@HOSTLOAD (on|off) (.*?)\s*$", line)
            if not m:
                continue
            ev = {"switch": m.group(1)}
            for field in m.group(2).split():
                k, _, v = field.partition("=")
                ev[k] = [float(x) for x in v.split(",")] if k == "loadavg" else v
            events.append(ev)
    return events


def host_load_text(events):
    """Names the load and gives the host's 1-minute load average when each phase ended: at a
    switch on the quiet phase before it ends, at a switch off the loaded phase."""
    if not events:
        return None
    first = events[0]
    quiet = [e["loadavg"][0] for e in events if e["switch"] == "on" and "loadavg" in e]
    loaded = [e["loadavg"][0] for e in events if e["switch"] == "off" and "loadavg" in e]

    def span(vals):
        if not vals:
            return "n/a"
        return f"{statistics.median(vals):.1f} (range {min(vals):.1f}-{max(vals):.1f})"

    return (f"Busy host: {first.get('procs', '?')} busy-loop processes "
            f"(`sh -c 'while :; do :; done'`) at nice {first.get('nice', '?')} on "
            f"{first.get('host_cpus', '?')} host CPUs during each loaded phase "
            f"(`tests/qemu/run.sh --host-load`). Host load average (1 min) at the end of the "
            f"quiet phases: {span(quiet)}; at the end of the loaded phases: {span(loaded)}.\n")


def report(runs, command, events=()):
    out = []
    n = max((len(v) for v in runs.values() if v), default=0)
    out.append(f"Medians of {n} repetitions (alternating order), 4 KiB random read, one vCPU.\n")
    busy = host_load_text(events)
    if busy:
        out.append(busy)
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
    loaded = any(label.endswith(LOADED) for label in runs)
    if loaded:
        out.append("| comparison | quiet: ratio of medians | quiet: median of per-repetition ratios "
                   "| loaded: ratio of medians | loaded: median of per-repetition ratios |")
        out.append("|---|---:|---|---:|---|")
    else:
        out.append("| comparison | ratio of medians | median of per-repetition ratios |")
        out.append("|---|---:|---|")

    def cells(num, den, key, invert):
        a, b = med(runs, num, key), med(runs, den, key)
        whole = ratio(b, a) if invert else ratio(a, b)
        return f"{whole} | {paired(runs, num, den, key, invert)}"

    def row(text, num, den, key, invert=False):
        line = f"| {text} | {cells(num, den, key, invert)} |"
        if loaded:
            if num + LOADED in runs and den + LOADED in runs:
                line += f" {cells(num + LOADED, den + LOADED, key, invert)} |"
            else:
                line += " - | - |"
        out.append(line)

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
        row(f"QD1 IOPS, ours not timing each I/O (--no-latency, as the peer runs): ours / {name}",
            "ours-qd1-untimed", f"{peer}-qd1", "iops")
        row(f"QD1 avg latency: {name} / ours (>1: ours is faster)",
            "ours-qd1", f"{peer}-qd1", "lat_ns.avg", invert=True)
    for with_it, without, what in [
        ("ours-qd128", "ours-qd128-contexts-cache", "contexts per slot over the cache"),
        ("ours-qd128-contexts-cache", "ours-qd128-contexts-box", "request cache over Box::new"),
        # Older logs: the cache was the default and Box::new its A/B.
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


def load_strace(path):
    """`strace -c -f` summaries by label: {"ios": N, "calls": {syscall: calls}}. The total line
    is left out (summed from the rows instead)."""
    out = {}
    line_re = re.compile(r"@@STRACE (\S+) (.*?)\s*$")
    end_re = re.compile(r"@@STRACE-END (\S+) ios=(\d*)")
    with open(path, errors="replace") as f:
        for line in f:
            m = end_re.search(line)
            if m:
                out.setdefault(m.group(1), {"calls": {}})["ios"] = int(m.group(2) or 0)
                continue
            m = line_re.search(line)
            if not m:
                continue
            fields = m.group(2).split()
            # % time, seconds, usecs/call, calls, [errors,] syscall
            if len(fields) < 5 or fields[-1] == "total" or not fields[3].isdigit():
                continue
            calls = out.setdefault(m.group(1), {"calls": {}})["calls"]
            calls[fields[-1]] = calls.get(fields[-1], 0) + int(fields[3])
    return out


def load_cpu(path):
    """`@@CPU <label> cpuN busy user system softirq ...` lines (per cent of each guest CPU over
    one run) by label: a list of runs, each {cpu: (busy, user, system, softirq)}."""
    out = {}
    with open(path, errors="replace") as f:
        for line in f:
            m = re.search(r"@@CPU (\S+) (.*?)\s*$", line)
            if not m:
                continue
            f5 = m.group(2).split()
            run = {}
            for i in range(0, len(f5) - 4, 5):
                try:
                    run[f5[i]] = tuple(float(x) for x in f5[i + 1:i + 5])
                except ValueError:
                    pass
            out.setdefault(m.group(1), []).append(run)
    return out


def cpu_cell(cpus, label):
    """Median busy % of the busier and of the less busy guest CPU (they trade places between
    runs), with the softirq share of all CPUs: "100 / 35 (sirq 12)"."""
    hi, lo, sirq = [], [], []
    for run in cpus.get(label, []):
        busy = sorted((v[0] for v in run.values()), reverse=True)
        if not busy:
            continue
        hi.append(busy[0])
        lo.append(busy[-1] if len(busy) > 1 else 0)
        sirq.append(sum(v[3] for v in run.values()))
    if not hi:
        return "-"
    if all(len(run) == 1 for run in cpus.get(label, [])):
        return f"{statistics.median(hi):.0f} (softirq {statistics.median(sirq):.0f})"
    return f"{statistics.median(hi):.0f} / {statistics.median(lo):.0f} (softirq {statistics.median(sirq):.0f})"


def report_tcp(runs, straces, command, cpus=None):
    """The NVMe/TCP table: ours (and a baseline build) against the kernel's NVMe/TCP host."""
    out = []
    n = max((len(v) for v in runs.values()), default=0)
    out.append(f"Medians of {n} repetitions (rotating order), 4 KiB random read, nsid 1 "
               "(null_blk, memory-backed) through nvmet-tcp on 127.0.0.1.\n")
    cpus = cpus or {}
    out.append("| run | IOPS (median) | avg latency µs | p50 µs | p99 µs | worker CPU µs / I/O "
               "| PDUs received / I/O | polls / I/O | guest CPUs busy % | IOPS of each run |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")

    def us(label, key):
        v = med(runs, label, key)
        return fmt(v and v / 1000, 1)

    def per_io(label, key):
        rs = []
        for r in runs.get(label, []):
            t = r.get("tcp") or {}
            if t.get(key) is not None and t.get("commands"):
                rs.append(t[key] / t["commands"])
        return fmt(statistics.median(rs), 2) if rs else "-"

    order = ["ours", "ours-yield", "ours-wait", "base", "kernel-irq", "kernel-polled"]
    labels = sorted(runs, key=lambda x: (int(x.rsplit("qd", 1)[1]) if "-qd" in x else 0,
                                         max((i for i, o in enumerate(order) if x.startswith(o + "-qd")), default=9), x))
    for label in labels:
        out.append(
            f"| {label} | {fmt(med(runs, label, 'iops'))} | {us(label, 'lat_ns.avg')}"
            f" | {us(label, 'lat_ns.p.50')} | {us(label, 'lat_ns.p.99')}"
            f" | {us(label, 'thread_cpu_ns_per_io')}"
            f" | {per_io(label, 'pdus_received')} | {per_io(label, 'polls')}"
            f" | {cpu_cell(cpus, label)}"
            f" | {', '.join(fmt(v) for v in values(runs, label, 'iops'))} |"
        )
    out.append("")
    out.append("| comparison | ratio of medians | median of per-repetition ratios |")
    out.append("|---|---:|---|")

    def row(text, num, den, key):
        if num not in runs or den not in runs:
            return
        out.append(f"| {text} | {ratio(med(runs, num, key), med(runs, den, key))} "
                   f"| {paired(runs, num, den, key)} |")

    for qd in ("qd1", "qd128"):
        for other, name in [("kernel-irq", "kernel host, io_uring interrupts"),
                            ("kernel-polled", "kernel host, io_uring polled"),
                            ("base", "baseline build")]:
            row(f"{qd.upper()} IOPS: ours / {name}", f"ours-{qd}", f"{other}-{qd}", "iops")
            row(f"{qd.upper()} avg latency: ours / {name} (<1: ours is faster)",
                f"ours-{qd}", f"{other}-{qd}", "lat_ns.avg")
        # The A/B variants of ours (same binary, one option), and each against the kernel
        # host's faster mode at this depth (by median IOPS).
        kernels = [k for k in (f"kernel-irq-{qd}", f"kernel-polled-{qd}") if k in runs]
        best = max(kernels, key=lambda k: med(runs, k, "iops") or 0, default=None)
        for variant, what in [("ours-yield", "--yield-idle (sched_yield after an empty poll)"),
                              ("ours-wait", "--interrupts (block in the socket after 64 empty polls)")]:
            row(f"{qd.upper()} IOPS: A/B ours {what} / ours", f"{variant}-{qd}", f"ours-{qd}", "iops")
            if best:
                mode = "interrupts" if "irq" in best else "polled"
                row(f"{qd.upper()} IOPS: ours {what} / kernel host, io_uring {mode}",
                    f"{variant}-{qd}", best, "iops")
    out.append("")
    if straces:
        out.append("Syscalls per I/O, one run of each under `strace -c -f` (which slows every "
                   "call down: count the calls, not the rates), less those of the same "
                   "program run for one I/O (start-up and teardown):\n")
        out.append("| run | I/Os | syscalls / I/O | the most frequent (per I/O) |")
        out.append("|---|---:|---:|---|")
        for label in sorted(straces, key=lambda x: labels.index(x) if x in labels else 99):
            if label.endswith("-setup"):
                continue
            st = straces[label]
            calls = dict(st["calls"])
            ios = st.get("ios") or 0
            # Start-up and teardown: the same program with one I/O.
            setup = straces.get(label + "-setup")
            if setup and setup.get("ios"):
                for k, v in setup["calls"].items():
                    calls[k] = max(0, calls.get(k, 0) - v)
                ios -= setup["ios"]
            if ios <= 0:
                out.append(f"| {label} | 0 | n/a | the run failed |")
                continue
            top = sorted(calls.items(), key=lambda kv: -kv[1])[:4]
            out.append(f"| {label} | {ios:,} | {sum(calls.values()) / ios:.2f} | "
                       + ", ".join(f"{k} {v / ios:.2f}" for k, v in top) + " |")
        out.append("")
    if command:
        out.append(f"Reproduce: `{command}`\n")
    return "\n".join(out)


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    log = args[0]
    tcp = "--tcp" in args
    update = args[args.index("--update") + 1] if "--update" in args else None
    command = args[args.index("--command") + 1] if "--command" in args else None
    runs = load(log)
    if not runs:
        sys.exit(f"no @@BENCH lines in {log}")
    if tcp:
        text = report_tcp(runs, load_strace(log), command, load_cpu(log))
        begin, end = TCP_BEGIN, TCP_END
        heading = "## NVMe/TCP: our initiator vs the kernel's NVMe/TCP host"
    else:
        text = report(runs, command, load_host_events(log))
        begin, end = BEGIN, END
        heading = "## QEMU guest: our driver vs the kernel's io_uring"
    print(text)
    if update:
        doc = open(update).read() if __import__("os").path.exists(update) else "# Performance\n"
        block = f"{begin}\n{text}\n{end}"
        if begin in doc and end in doc:
            doc = doc[: doc.index(begin)] + block + doc[doc.index(end) + len(end):]
        else:
            doc = doc.rstrip() + f"\n\n{heading}\n\n" + block + "\n"
        open(update, "w").write(doc)


if __name__ == "__main__":
    main()
