#!/usr/bin/env python3
"""Reduces a QEMU trace (run.sh --trace, log backend with -msg timestamp=on) to per-I/O counts
and timings of the emulated NVMe controller, one row per tool run.

    trace-per-io.py TRACE_LOG SERIAL_LOG [--json OUT]

The serial log names the runs in order (`@@TRACE-RUN <label>` from tests/qemu/cases/trace-io.sh).
Each tool run enables the controller once (CC.EN 0 -> 1: `pci_nvme_mmio_start_success`), so the
trace is cut at those events and the last N pieces are matched with the N labels.

Per run: I/O commands fetched (`pci_nvme_io_cmd` on a queue other than the admin queue) and, per
I/O, MMIO doorbell writes (SQ tail, CQ head), shadow doorbell reads, EventIdx writes, PRP and SGL
mappings, IOTLB misses (`vtd_iotlb_page_update`) and hits (`vtd_iotlb_page_hit`, when traced).
Timing (medians, microseconds, from the trace's timestamps; tracing itself slows the device
model, so read them relative to each other): the device's passes over the SQ (maximal runs of
events of the thread that fetches commands, not interrupted by an event of the vCPU thread) and
the commands fetched per pass; for each MMIO doorbell write, the time since the device thread's
last event (a write that waited for the device model to release QEMU's global lock lands right
after its pass); and per command: SQ doorbell -> fetch (pickup), fetch -> completion queued
(service), completion queued -> next SQ doorbell or fetch (turnaround: posting, the guest's
reaping and its next submission).
"""
import json
import re
import statistics
import sys
from collections import Counter, defaultdict

LINE = re.compile(r"^(\d+)@(\d+)\.(\d+):(\w+)\s?(.*)$")
QID = re.compile(r"\b(?:sqid|cqid|qid)[ =](\d+)")
CID = re.compile(r"\bcid (\d+)")

COUNTED = {
    "pci_nvme_mmio_doorbell_sq": "mmio_sq",
    "pci_nvme_mmio_doorbell_cq": "mmio_cq",
    "pci_nvme_shadow_doorbell_sq": "shadow_sq_read",
    "pci_nvme_shadow_doorbell_cq": "shadow_cq_read",
    "pci_nvme_eventidx_sq": "eventidx_sq_write",
    "pci_nvme_eventidx_cq": "eventidx_cq_write",
    "pci_nvme_map_prp": "map_prp",
    "pci_nvme_map_sgl": "map_sgl",
    "vtd_iotlb_page_update": "iotlb_miss",
    "vtd_iotlb_page_hit": "iotlb_hit",
    "pci_nvme_irq_msix": "irq_msix",
}


def parse(path):
    events = []
    with open(path, errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            tid, sec, usec, name, rest = m.groups()
            t = int(sec) * 1_000_000 + int(usec)
            q = QID.search(rest)
            c = CID.search(rest)
            events.append((t, int(tid), name, int(q.group(1)) if q else None,
                           int(c.group(1)) if c else None, rest))
    events.sort(key=lambda e: e[0])
    return events


IOS_REPORTED = re.compile(r"^@@TRACE-OUT (\S+) .*\bI/Os=(\d+)")


def labels(serial):
    """Run labels in order, and the I/O counts our nvme-perf reported (for aligning)."""
    out, reported = [], {}
    with open(serial, errors="replace") as f:
        for line in f:
            if line.startswith("@@TRACE-RUN "):
                label = line.split()[1]
                if label != "end":
                    out.append(label)
            m = IOS_REPORTED.match(line)
            if m:
                reported[m.group(1)] = int(m.group(2))
    return out, reported


def align(segments, names, reported):
    """Index of the segment of the first run: the kernel's own enables (boot, rebinding at the
    end) come before and after the runs; choose the offset whose I/O counts best match what
    nvme-perf reported (it fetches at most a few more commands than it completes in time)."""
    ios = [sum(1 for e in seg if e[2] == "pci_nvme_io_cmd" and e[3]) for seg in segments]
    best, best_score = len(segments) - len(names), None
    for off in range(len(segments) - len(names) + 1):
        score = 0.0
        for i, name in enumerate(names):
            if name in reported and reported[name]:
                score += abs(ios[off + i] - reported[name]) / reported[name]
        if best_score is None or score < best_score:
            best, best_score = off, score
    return best


def med(xs):
    return round(statistics.median(xs), 1) if xs else None


def reduce(seg):
    ios = [e for e in seg if e[2] == "pci_nvme_io_cmd" and e[3]]
    n = len(ios)
    row = {"ios": n}
    counts = Counter()
    for e in seg:
        key = COUNTED.get(e[2])
        if key is None:
            continue
        # Doorbell/EventIdx events of the admin queue (qid 0) are set-up, not I/O.
        if key.startswith(("mmio_", "shadow_", "eventidx_")) and not e[3]:
            continue
        counts[key] += 1
    for key in COUNTED.values():
        row[key + "_per_io"] = round(counts[key] / n, 4) if n else None
    if not n:
        return row
    dev = Counter(e[1] for e in ios).most_common(1)[0][0]
    vcpu_candidates = Counter(e[1] for e in seg if e[2].startswith("pci_nvme_mmio_doorbell"))
    vcpu = vcpu_candidates.most_common(1)[0][0] if vcpu_candidates else None
    row["threads"] = {"device": dev, "vcpu": vcpu}
    # Device passes: maximal runs of device-thread events between vCPU-thread events.
    passes, fetched, last_dev = [], 0, None
    mmio_gaps = []
    in_pass = False
    for e in seg:
        if e[1] == dev:
            in_pass = True
            last_dev = e[0]
            if e[2] == "pci_nvme_io_cmd" and e[3]:
                fetched += 1
        elif e[1] == vcpu:
            if in_pass and fetched:
                passes.append(fetched)
            in_pass, fetched = False, 0
            if e[2].startswith("pci_nvme_mmio_doorbell") and e[3] and last_dev is not None:
                mmio_gaps.append(e[0] - last_dev)
    if in_pass and fetched:
        passes.append(fetched)
    row["passes_with_fetches"] = len(passes)
    row["fetches_per_pass_median"] = med(passes)
    row["fetches_per_pass_mean"] = round(sum(passes) / len(passes), 2) if passes else None
    row["mmio_after_device_event_us_median"] = med(mmio_gaps)
    row["mmio_within_5us_of_device_event"] = (
        round(sum(g <= 5 for g in mmio_gaps) / len(mmio_gaps), 3) if mmio_gaps else None)
    # Per command: pickup, service, turnaround.
    last_sq_db = None
    pending = {}
    pickup, service, turnaround = [], [], []
    completed_at = None
    for e in seg:
        name = e[2]
        if name == "pci_nvme_mmio_doorbell_sq" and e[3]:
            if completed_at is not None:
                turnaround.append(e[0] - completed_at)
                completed_at = None
            last_sq_db = e[0]
        elif name == "pci_nvme_io_cmd" and e[3]:
            if completed_at is not None:
                turnaround.append(e[0] - completed_at)
                completed_at = None
            if last_sq_db is not None:
                pickup.append(e[0] - last_sq_db)
                last_sq_db = None
            pending[e[4]] = e[0]
        elif name == "pci_nvme_enqueue_req_completion" and e[3]:
            t1 = pending.pop(e[4], None)
            if t1 is not None:
                service.append(e[0] - t1)
                completed_at = e[0]
    # Rounds: from one SQ tail MMIO write to the next. In a round the device fetches and
    # completes what the write announced (device time: doorbell -> the device thread's last
    # event) and the guest reaps, resubmits and rings again (guest time: from there to the
    # next doorbell). Tracing slows the device side (it emits most events), hardly the guest side.
    dbs = [e[0] for e in seg if e[2] == "pci_nvme_mmio_doorbell_sq" and e[3]]
    dev_per_io, guest_per_io, round_ios = [], [], []
    j = 0
    for a, b in zip(dbs, dbs[1:]):
        fetched, last_dev = 0, None
        while j < len(seg) and seg[j][0] < a:
            j += 1
        k = j
        while k < len(seg) and seg[k][0] < b:
            e = seg[k]
            if e[2] == "pci_nvme_io_cmd" and e[3]:
                fetched += 1
            if e[1] == dev:
                # The device thread's last event of the round: the last completion queued or,
                # with shadow doorbells, the last CQ shadow head read while posting.
                last_dev = e[0]
            k += 1
        if fetched and last_dev is not None:
            round_ios.append(fetched)
            dev_per_io.append((last_dev - a) / fetched)
            guest_per_io.append((b - last_dev) / fetched)
    row["ios_per_round_median"] = med(round_ios)
    row["round_device_us_per_io_median"] = med(dev_per_io)
    row["round_guest_us_per_io_median"] = med(guest_per_io)
    row["pickup_us_median"] = med(pickup)
    row["service_us_median"] = med(service)
    row["turnaround_us_median"] = med(turnaround)
    span = ios[-1][0] - ios[0][0]
    row["traced_us_per_io"] = round(span / (n - 1), 2) if n > 1 else None
    return row


def main():
    args = sys.argv[1:]
    out_json = None
    if "--json" in args:
        i = args.index("--json")
        out_json = args[i + 1]
        del args[i:i + 2]
    if len(args) != 2:
        sys.exit(__doc__)
    events = parse(args[0])
    names, reported = labels(args[1])
    cuts = [i for i, e in enumerate(events) if e[2] == "pci_nvme_mmio_start_success"]
    segments = [events[a:b] for a, b in zip(cuts, cuts[1:] + [len(events)])]
    if len(segments) < len(names):
        sys.exit(f"trace-per-io.py: {len(segments)} controller enables in the trace but "
                 f"{len(names)} runs in the serial log; was pci_nvme_mmio_start_success traced?")
    off = align(segments, names, reported)
    segments = segments[off:off + len(names)]
    rows = {name: reduce(seg) for name, seg in zip(names, segments)}
    cols = [("ios", "I/Os"), ("mmio_sq_per_io", "MMIO SQ db"), ("mmio_cq_per_io", "MMIO CQ db"),
            ("shadow_sq_read_per_io", "shadow SQ rd"), ("shadow_cq_read_per_io", "shadow CQ rd"),
            ("eventidx_sq_write_per_io", "EvIdx SQ wr"), ("eventidx_cq_write_per_io", "EvIdx CQ wr"),
            ("map_prp_per_io", "PRP maps"), ("map_sgl_per_io", "SGL maps"),
            ("iotlb_miss_per_io", "IOTLB miss"), ("iotlb_hit_per_io", "IOTLB hit"),
            ("fetches_per_pass_mean", "cmds/pass"), ("ios_per_round_median", "I/Os/round"),
            ("round_device_us_per_io_median", "round: device µs/I/O"),
            ("round_guest_us_per_io_median", "round: guest µs/I/O"),
            ("mmio_after_device_event_us_median", "MMIO after dev µs"),
            ("mmio_within_5us_of_device_event", "MMIO ≤5µs after dev"),
            ("pickup_us_median", "db→fetch µs"), ("service_us_median", "fetch→cqe µs"),
            ("turnaround_us_median", "cqe→next µs"), ("traced_us_per_io", "µs/I/O traced")]
    print("| run | " + " | ".join(c[1] for c in cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for name, row in rows.items():
        cells = []
        for key, _ in cols:
            v = row.get(key)
            cells.append("n/a" if v is None else (f"{v:,}" if isinstance(v, int) else f"{v}"))
        print(f"| {name} | " + " | ".join(cells) + " |")
    if out_json:
        with open(out_json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
