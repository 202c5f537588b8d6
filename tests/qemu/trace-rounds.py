#!/usr/bin/env python3
"""Distribution of QD1 rounds (one SQ tail doorbell to the next) in a tests/trace-io.sh trace,
and where the time of the long rounds (> 1 ms) goes. A QD1 average is dominated by those on a
loaded host, so a median round says little about IOPS; this splits them.

Usage: trace-rounds.py target/qemu-trace.log target/trace-guest.log

Per QD1 run (the first and last 5 % of rounds left out): rounds, mean / median / p90 / p99
round in µs, the share of the run's time spent in rounds over 100 µs and over 1 ms, the medians
of the CQ head doorbell -> next SQ tail doorbell gap, of SQ doorbell -> completion queued
(device) and of completion queued -> CQ head doorbell (guest); then for the long rounds their
count, total, median length and spacing, and how their time splits between the phases
db->fetch (device thread not yet run), fetch->cqe (device), cqe->cqdb (guest not yet seen the
entry or not yet written the head) and cqdb->sqdb (guest building the next command)."""
import bisect
import importlib.util
import os
import statistics
import sys

spec = importlib.util.spec_from_file_location(
    "trace_per_io", os.path.join(os.path.dirname(os.path.abspath(__file__)), "trace-per-io.py"))
tpi = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tpi)

PHASE = {"pci_nvme_mmio_doorbell_sq": "db->fetch", "pci_nvme_io_cmd": "fetch->cqe",
         "pci_nvme_enqueue_req_completion": "cqe->cqdb", "pci_nvme_mmio_doorbell_cq": "cqdb->sqdb"}


def after(times, t):
    i = bisect.bisect_right(times, t)
    return times[i] - t if i < len(times) else None


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    events = tpi.parse(sys.argv[1])
    names, reported = tpi.labels(sys.argv[2])
    cuts = [i for i, e in enumerate(events) if e[2] == "pci_nvme_mmio_start_success"]
    segs = [events[a:b] for a, b in zip(cuts, cuts[1:] + [len(events)])]
    off = tpi.align(segs, names, reported)
    segs = segs[off:off + len(names)]
    print("| run | rounds | mean µs | median | p90 | p99 | time in rounds > 100 µs | > 1 ms "
          "| CQ db → SQ db µs | SQ db → cqe µs | cqe → CQ db µs |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    stalls = []
    for name, seg in zip(names, segs):
        if not (name.endswith("-qd1") or "-qd1-" in name):
            continue
        ev = [e for e in seg if e[3]]  # I/O queues only
        sq_ev = [e for e in ev if e[2] == "pci_nvme_mmio_doorbell_sq"]
        k = len(sq_ev) // 20
        sq_ev = sq_ev[k:len(sq_ev) - k]
        if len(sq_ev) < 3:
            continue
        sq = [e[0] for e in sq_ev]
        cq = [e[0] for e in ev if e[2] == "pci_nvme_mmio_doorbell_cq"]
        cqe = [e[0] for e in ev if e[2] == "pci_nvme_enqueue_req_completion"]
        rounds = sorted(b - a for a, b in zip(sq, sq[1:]))
        total = sum(rounds)
        pct = lambda q: rounds[min(len(rounds) - 1, int(q * len(rounds)))]
        med = lambda xs: statistics.median([x for x in xs if x is not None] or [0])
        gap = med(after(sq, t) for t in cq if sq[0] <= t <= sq[-1])
        dev = med(after(cqe, t) for t in sq)
        gst = med(after(cq, t) for t in cqe if sq[0] <= t <= sq[-1])
        print(f"| {name} | {len(rounds)} | {total / len(rounds):.1f} | {pct(0.5)} | {pct(0.9)} "
              f"| {pct(0.99)} | {100 * sum(x for x in rounds if x > 100) / total:.0f} % "
              f"| {100 * sum(x for x in rounds if x > 1000) / total:.0f} % | {gap} | {dev} | {gst} |")
        # The long rounds, phase by phase.
        pos = {id(e): i for i, e in enumerate(ev)}
        phases = dict.fromkeys(PHASE.values(), 0)
        longs = []
        for a, b in zip(sq_ev, sq_ev[1:]):
            if b[0] - a[0] <= 1000:
                continue
            longs.append((a[0], b[0] - a[0]))
            seq = ev[pos[id(a)]:pos[id(b)] + 1]
            for x, y in zip(seq, seq[1:]):
                phases[PHASE[x[2]]] += y[0] - x[0]
        lt = sum(d for _, d in longs)
        spacing = [b[0] - a[0] for a, b in zip(longs, longs[1:])]
        stalls.append((name, len(longs), lt, med([d for _, d in longs]), med(spacing),
                       {p: round(100 * v / max(lt, 1)) for p, v in phases.items()}))
    print()
    print("| run | rounds > 1 ms | their total ms | median µs | median spacing µs "
          "| db→fetch % | fetch→cqe % | cqe→CQ db % | CQ db→SQ db % |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, n, lt, m, sp, ph in stalls:
        print(f"| {name} | {n} | {lt / 1000:.0f} | {m:.0f} | {sp:.0f} | {ph['db->fetch']} "
              f"| {ph['fetch->cqe']} | {ph['cqe->cqdb']} | {ph['cqdb->sqdb']} |")


if __name__ == "__main__":
    main()
