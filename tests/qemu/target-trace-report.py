#!/usr/bin/env python3
"""Where a QD1 round of our NVMe/TCP target goes: reduces the `@@TGTTRACE` lines of a
tests/target-bench.sh TB_TRACE=1 log (the trace of crates/target/src/trace.rs, one event a
line: `<thread> <µs> <event> <a> <b>`) to per-command phases and poll(2) waits.

Usage: target-trace-report.py LOG

Per I/O command (matched by CID, in order; the first and last 5 % left out):
  recv->submit      capsule in -> submitted to the PCIe queue (target CPU)
  submit->complete  the device, its MSI-X and the group's wake-up
  complete->sent    response built and written to the socket; split (where the trace has
                    `write`/`wrote` events) into complete->write (building it), writev (the
                    vectored write that took the response's last byte) and wrote->sent
  sent->recv        the next command's capsule arriving (the host side and loopback)
  round             recv -> next recv
Per wait (poll(2)): its length, split by what ended it (interrupt or socket while a command
was at the device, socket while none was, the 50 ms cap: returned 0), and its share of the
submit->complete and sent->recv phases; the time from a wake-up to the event it led to.
"""
import bisect
import statistics
import sys


def pct(v, p):
    if not v:
        return float("nan")
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100 * len(v)))]


def row(name, v):
    if not v:
        print(f"| {name} | 0 | | | | | |")
        return
    print(f"| {name} | {len(v)} | {statistics.mean(v):.0f} | {pct(v, 50):.0f} | {pct(v, 90):.0f} | "
          f"{pct(v, 99):.0f} | {max(v):.0f} |")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    ev = []
    with open(sys.argv[1], errors="replace") as f:
        for line in f:
            i = line.find("@@TGTTRACE ")
            if i < 0:
                continue
            p = line[i + len("@@TGTTRACE "):].split()
            if len(p) != 5 or p[1] == "end":
                if len(p) >= 4 and p[1] == "end" and p[3] != "0":
                    print(f"warning: {p[3]} events dropped (buffer full)")
                continue
            try:
                ev.append((float(p[1]), p[2], int(p[3]), int(p[4])))
            except ValueError:
                continue
    if not ev:
        sys.exit(f"no @@TGTTRACE events in {sys.argv[1]}")
    ev.sort(key=lambda e: e[0])
    cmds = []  # dicts with recv, submit, complete, sent
    open_cmd = {}
    waits = []  # (start, end, ready, wake, in_flight)
    writes = []  # (start, end, bytes taken)
    wr_start = None
    in_flight = 0
    wstart = None
    for t, name, a, b in ev:
        if name == "recv":
            c = {"recv": t}
            open_cmd[a] = c
            cmds.append(c)
        elif name in ("submit", "complete", "sent"):
            c = open_cmd.get(a)
            if c is not None:
                c[name] = t
                if name == "submit":
                    in_flight += 1
                elif name == "complete":
                    in_flight = max(0, in_flight - 1)
                elif name == "sent":
                    del open_cmd[a]
        elif name == "write":
            wr_start = t
        elif name == "wrote" and wr_start is not None:
            writes.append((wr_start, t, a))
            wr_start = None
        elif name == "wait":
            wstart = (t, in_flight)
        elif name == "woke" and wstart is not None:
            waits.append((wstart[0], t, a, b, wstart[1]))
            wstart = None
    io = [c for c in cmds if all(k in c for k in ("submit", "complete", "sent"))]
    cut = len(io) // 20
    io = io[cut:len(io) - cut] if len(io) > 40 else io
    ph = {k: [] for k in ("recv->submit", "submit->complete", "complete->sent", "sent->recv", "round")}
    for i, c in enumerate(io):
        ph["recv->submit"].append(c["submit"] - c["recv"])
        ph["submit->complete"].append(c["complete"] - c["submit"])
        ph["complete->sent"].append(c["sent"] - c["complete"])
        if i + 1 < len(io):
            ph["sent->recv"].append(io[i + 1]["recv"] - c["sent"])
            ph["round"].append(io[i + 1]["recv"] - c["recv"])
    print(f"{len(io)} I/O commands traced (of {len(cmds)} capsules), {len(waits)} waits\n")
    print("| phase (µs) | n | mean | p50 | p90 | p99 | max |")
    print("|---|---|---|---|---|---|---|")
    if writes:
        # The last write that ended at or before `sent` (the response's last byte).
        ends = [e for _, e, _ in writes]
        split = {"complete->write": [], "writev": [], "wrote->sent": []}
        for c in io:
            j = bisect.bisect_right(ends, c["sent"]) - 1
            if j < 0 or writes[j][0] < c["complete"]:
                continue
            ws, we, _ = writes[j]
            split["complete->write"].append(ws - c["complete"])
            split["writev"].append(we - ws)
            split["wrote->sent"].append(c["sent"] - we)
        ph = {**{k: v for k, v in ph.items() if k != "sent->recv" and k != "round"}, **split,
              "sent->recv": ph["sent->recv"], "round": ph["round"]}
    for k, v in ph.items():
        row(k, v)
    if writes:
        print()
        print("| socket writes (µs) | n | mean | p50 | p90 | p99 | max |")
        print("|---|---|---|---|---|---|---|")
        row("every writev", [e - s for s, e, _ in writes])
        row("writev that took nothing", [e - s for s, e, n in writes if n == 0])
    # Waits inside each command's phases.
    lo, hi = (io[0]["recv"], io[-1]["sent"]) if io else (0, 0)
    w = [x for x in waits if lo <= x[0] <= hi]
    print()
    print("| wait (µs) | n | mean | p50 | p90 | p99 | max |")
    print("|---|---|---|---|---|---|---|")
    row("all", [e - s for s, e, *_ in w])
    row("command at the device", [e - s for s, e, n, k, f in w if f > 0 and n > 0])
    row("no command at the device", [e - s for s, e, n, k, f in w if f == 0 and n > 0])
    row("timed out (returned 0)", [e - s for s, e, n, k, f in w if n == 0])
    # Share of phases spent blocked.
    def blocked(a, b):
        return sum(max(0.0, min(e, b) - max(s, a)) for s, e, *_ in w if e > a and s < b)
    sc = sum(c["complete"] - c["submit"] for c in io)
    sb = sum(blocked(c["submit"], c["complete"]) for c in io)
    sr = sum(io[i + 1]["recv"] - c["sent"] for i, c in enumerate(io[:-1]))
    rb = sum(blocked(c["sent"], io[i + 1]["recv"]) for i, c in enumerate(io[:-1]))
    print()
    if sc:
        print(f"submit->complete: {sb / sc * 100:.0f} % of its time blocked in poll(2)")
    if sr:
        print(f"sent->recv: {rb / sr * 100:.0f} % of its time blocked in poll(2)")
    # Wake-up to the event it led to (complete or recv).
    lag_c, lag_r = [], []
    ends = sorted(e for _, e, *_ in w)
    for c in io:
        j = bisect.bisect_right(ends, c["complete"]) - 1
        if j >= 0 and ends[j] >= c["submit"]:
            lag_c.append(c["complete"] - ends[j])
    for i, c in enumerate(io[1:]):
        # Only a wait that ended after the previous response went out.
        j = bisect.bisect_right(ends, c["recv"]) - 1
        if j >= 0 and ends[j] >= io[i]["sent"]:
            lag_r.append(c["recv"] - ends[j])
    print()
    print("| wake-up -> event (µs) | n | mean | p50 | p90 | p99 | max |")
    print("|---|---|---|---|---|---|---|")
    row("woke -> complete", lag_c)
    row("woke -> recv", lag_r)


if __name__ == "__main__":
    main()
