#!/usr/bin/env python3
"""Draws the plots of docs/performance.md from a bench.sh guest log (the `@@BENCH <label> <json>`
and `@@PEER` lines that tests/qemu/bench-report.py reads):

  iops-vs-qd.png   IOPS against queue depth (labels <who>-sweep-qd<N>, BENCH_SWEEP=1) for ours,
                   the kernel's polled io_uring and the peers present in the log;
  qd1-latency.png  the latency distribution at QD1 (the `histogram_ns` of ours-qd1,
                   uring-polled-qd1 and uring-irq-qd1; the peers' averages as dashed lines);
  ab.png           the A/B of each of our mechanisms (QD128 IOPS with and without it; QD1 latency
                   polled against hybrid interrupts).

Usage: bench-plots.py [LOG...] [--out DIR]   (defaults: target/bench-guest.log, docs/img)
With several logs, each label's runs from all of them are pooled (medians over the pool).
Needs matplotlib (pip install matplotlib, or apt-get install python3-matplotlib)."""
import importlib.util
import os
import re
import statistics
import sys

sys.dont_write_bytecode = True  # no __pycache__ next to bench-report.py
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
NOTE = "QEMU (TCG) guest, one vCPU, emulated null-backed NVMe, shared noisy host: indicative only"

# Label prefix in the log -> legend name and colour, in legend order.
WHO = [
    ("ours", "ours (vfio-pci)", "tab:blue"),
    ("spdk", "SPDK spdk_nvme_perf", "tab:green"),
    ("libvfn", "libvfn examples/perf", "tab:purple"),
    ("uring-polled", "kernel io_uring, polled", "tab:orange"),
]

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("bench-plots.py needs matplotlib: pip install matplotlib "
             "(or apt-get install python3-matplotlib)")


def load_runs(log):
    """The runs by label, parsed by bench-report.py's load (one source for the log format)."""
    spec = importlib.util.spec_from_file_location(
        "bench_report", os.path.join(os.path.dirname(__file__), "bench-report.py"))
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    return report.load(log)


def median(runs, label, key):
    """Median of a numeric field (dotted path) over the runs of a label, or None."""
    vals = []
    for r in runs.get(label, []):
        v = r
        for k in key.split("."):
            v = v.get(k) if isinstance(v, dict) else None
        if isinstance(v, (int, float)):
            vals.append(v)
    return statistics.median(vals) if vals else None


def finish(fig, path):
    fig.text(0.5, 0.005, NOTE, ha="center", va="bottom", fontsize=7, color="gray")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"bench-plots: wrote {path}")


def plot_sweep(runs, out):
    sweep = re.compile(r"^(.*)-sweep-qd(\d+)$")
    # A run that took far longer than the others did not measure throughput: some I/O hung
    # until nvme-perf gave up on it. Such points are left out, and named on the plot.
    runtimes = [r["runtime_s"] for label in runs if sweep.match(label)
                for r in runs[label] if isinstance(r.get("runtime_s"), (int, float))]
    limit = 3 * statistics.median(runtimes) if runtimes else None
    series, stalled = {}, []
    for label in runs:
        m = sweep.match(label)
        if not m:
            continue
        runtime = median(runs, label, "runtime_s")
        if limit and runtime and runtime > limit:
            print(f"bench-plots: {label} ran {runtime:.0f} s (an I/O hung): left out",
                  file=sys.stderr)
            stalled.append(f"{m.group(1)} QD{m.group(2)}")
            continue
        iops = median(runs, label, "iops")
        if iops:
            series.setdefault(m.group(1), []).append((int(m.group(2)), iops))
    if not series:
        print("bench-plots: no sweep runs (<who>-sweep-qd<N>; BENCH_SWEEP=1) in the log; "
              "skipping iops-vs-qd.png", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(8, 5))
    for prefix, name, colour in WHO:
        points = sorted(series.pop(prefix, []))
        if points:
            ax.plot([q for q, _ in points], [i / 1000 for _, i in points], marker="o",
                    label=name, color=colour)
    for prefix, points in sorted(series.items()):
        points.sort()
        ax.plot([q for q, _ in points], [i / 1000 for _, i in points], marker="o", label=prefix)
    qds = sorted({q for label in runs if (m := sweep.match(label)) for q in [int(m.group(2))]})
    ax.set_xscale("log", base=2)
    ax.set_xticks(qds, [str(q) for q in qds])
    ax.set_xlabel("queue depth")
    ax.set_ylabel("kIOPS")
    ax.set_ylim(bottom=0)
    ax.set_title("4 KiB random read: IOPS against queue depth")
    ax.grid(True, alpha=0.3)
    ax.legend()
    if stalled:
        ax.text(0.99, 0.02, "left out (an I/O hung, the run took ~60 s):\n"
                + ", ".join(sorted(stalled, key=lambda s: (s.split()[0], int(s.split("QD")[1])))),
                transform=ax.transAxes, ha="right", va="bottom", fontsize=7, wrap=True)
    finish(fig, os.path.join(out, "iops-vs-qd.png"))


def histogram(runs, label):
    """The `histogram_ns` buckets of a label summed over its runs: sorted (upper ns, count)."""
    total = {}
    for r in runs.get(label, []):
        for upper, count in r.get("histogram_ns") or []:
            total[upper] = total.get(upper, 0) + count
    buckets = sorted(total.items())
    # The leading empty buckets (from 1 µs up) would only stretch the axis: keep one.
    first = next((i for i, (_, c) in enumerate(buckets) if c), len(buckets))
    return buckets[max(first - 1, 0):]


def plot_qd1(runs, out):
    hists = [("ours-qd1", "ours (vfio-pci), polled", "tab:blue"),
             ("uring-polled-qd1", "kernel io_uring, polled", "tab:orange"),
             ("uring-irq-qd1", "kernel io_uring, interrupts", "tab:red")]
    drawn = [(label, name, colour, histogram(runs, label)) for label, name, colour in hists]
    drawn = [d for d in drawn if sum(c for _, c in d[3])]
    if not drawn:
        print("bench-plots: no histogram_ns in the QD1 runs; skipping qd1-latency.png",
              file=sys.stderr)
        return
    fig, (dens, cdf) = plt.subplots(1, 2, figsize=(11, 4.5))
    for label, name, colour, buckets in drawn:
        n = sum(c for _, c in buckets)
        x = [upper / 1000 for upper, _ in buckets]
        avg = median(runs, label, "lat_ns.avg")
        legend = f"{name} (avg {avg / 1000:.1f} µs)" if avg else name
        dens.step(x, [100 * c / n for _, c in buckets], where="pre", color=colour, label=legend)
        acc, ys = 0, []
        for _, c in buckets:
            acc += c
            ys.append(100 * acc / n)
        cdf.step(x, ys, where="post", color=colour, label=name)
    for label, name, colour in [("spdk-qd1", "SPDK", "tab:green"),
                                ("libvfn-qd1", "libvfn", "tab:purple")]:
        avg = median(runs, label, "lat_ns.avg")
        if avg:
            for ax in (dens, cdf):
                ax.axvline(avg / 1000, linestyle="--", color=colour,
                           label=f"{name} average ({avg / 1000:.1f} µs; no histogram)")
    for ax in (dens, cdf):
        ax.set_xscale("log")
        ax.set_xlabel("latency (µs, log scale)")
        ax.grid(True, alpha=0.3)
    dens.set_ylabel("% of I/Os per bucket (buckets 10 % wide)")
    dens.set_title("QD1 4 KiB random read: latency distribution")
    dens.legend(fontsize=8)
    cdf.set_ylabel("% of I/Os at or below")
    cdf.set_title("cumulative")
    cdf.set_ylim(0, 100)
    cdf.legend(fontsize=8, loc="lower right")
    finish(fig, os.path.join(out, "qd1-latency.png"))


def plot_ab(runs, out):
    base = median(runs, "ours-qd128", "iops")
    variants = [("ours-qd128", "all on"),
                ("ours-qd128-contexts-cache", "contexts from\nthe cache"),
                ("ours-qd128-contexts-box", "contexts\nBox::new"),
                ("ours-qd128-no-request-cache", "no request\ncache"),
                ("ours-qd128-no-batch-prefetch", "no batched\ntag prefetch"),
                ("ours-qd128-no-shadow-doorbells", "no shadow\ndoorbells"),
                ("ours-qd128-shadow-doorbells", "shadow doorbells\nforced on"),
                ("ours-qd128-no-sgl", "PRP instead\nof SGL"),
                ("ours-qd128-interrupts", "hybrid\ninterrupts")]
    bars = [(name, median(runs, label, "iops")) for label, name in variants]
    bars = [(name, v) for name, v in bars if v]
    lat = [(name, median(runs, label, "lat_ns.avg"))
           for label, name in [("ours-qd1", "polled"), ("ours-qd1-interrupts", "hybrid\ninterrupts")]]
    lat = [(name, v) for name, v in lat if v]
    if not base or len(bars) < 2:
        print("bench-plots: no A/B runs (ours-qd128-no-*) in the log; skipping ab.png",
              file=sys.stderr)
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5),
                                      gridspec_kw={"width_ratios": [5, 2]})
    xs = range(len(bars))
    left.bar(xs, [v / 1000 for _, v in bars],
             color=["tab:blue"] + ["tab:gray"] * (len(bars) - 1))
    for x, (_, v) in zip(xs, bars):
        left.annotate(f"{v / base:.2f}x", (x, v / 1000), ha="center", va="bottom", fontsize=9)
    left.set_xticks(list(xs), [name for name, _ in bars], fontsize=8)
    left.set_ylabel("kIOPS")
    n = len(runs.get("ours-qd128", []))
    left.set_title(f"QD128, {n} run{'s' if n != 1 else ''} each: each mechanism turned off "
                   "(ratio to all on)", fontsize=10)
    left.grid(True, axis="y", alpha=0.3)
    if lat:
        xs = range(len(lat))
        right.bar(xs, [v / 1000 for _, v in lat], color=["tab:blue", "tab:gray"][: len(lat)])
        for x, (_, v) in zip(xs, lat):
            right.annotate(f"{v / 1000:.1f} µs", (x, v / 1000), ha="center", va="bottom",
                           fontsize=9)
        right.set_xticks(list(xs), [name for name, _ in lat], fontsize=8)
    right.set_ylabel("average latency (µs)")
    right.set_title("QD1 latency")
    right.grid(True, axis="y", alpha=0.3)
    finish(fig, os.path.join(out, "ab.png"))


def main():
    args = sys.argv[1:]
    if "-h" in args or "--help" in args:
        print(__doc__)
        return
    out = os.path.join(ROOT, "docs", "img")
    if "--out" in args:
        i = args.index("--out")
        out = args[i + 1]
        del args[i:i + 2]
    logs = args or [os.path.join(ROOT, "target", "bench-guest.log")]
    runs = {}
    for log in logs:
        for label, found in load_runs(log).items():
            runs.setdefault(label, []).extend(found)
    if not runs:
        sys.exit(f"bench-plots: no @@BENCH lines in {' '.join(logs)}")
    os.makedirs(out, exist_ok=True)
    plot_sweep(runs, out)
    plot_qd1(runs, out)
    plot_ab(runs, out)


if __name__ == "__main__":
    main()
