# Orderly hot-unplug request under load (not a surprise removal) (needs `run.sh --hotplug`: the controller behind a
# pcie-root-port, the host sending QMP device_del when the guest prints "@@HOST device_del").
# pciehp powers the slot off after the attention button; vfio-pci then relays a device
# request to the user. nvme-perf must fail its I/O with Removed and exit within 1 s of that
# request, without hanging or panicking, so that the removal completes.
# shellcheck disable=SC1091 # /tests/lib.sh exists in the guest only
. /tests/lib.sh

# Seconds since boot (the clock of the kernel log's timestamps), to 10 ms.
uptime_s() {
    cut -d' ' -f1 /proc/uptime
}

bind_vfio
echo "+ nvme-perf $NVME_BDF -n 1 -w randread -q 32 -t 120 --quiet (in the background)"
nvme-perf "$NVME_BDF" -n 1 -w randread -q 32 -t 120 --quiet >/tmp/perf.out 2>/tmp/perf.err &
pid=$!
sleep 2
kill -0 "$pid" 2>/dev/null || { cat /tmp/perf.out /tmp/perf.err; fail "nvme-perf ended before the unplug"; }
echo "@@HOST device_del"
i=0
while kill -0 "$pid" 2>/dev/null; do
    i=$((i + 1))
    [ "$i" -lt 600 ] || {
        dmesg | tail -n 20
        fail "nvme-perf still runs 60 s after device_del"
    }
    sleep 0.05
done
t_exit=$(uptime_s)
rc=0
wait "$pid" || rc=$?
sed 's/^/    stderr: /' /tmp/perf.err | tail -n 5
echo "nvme-perf exit status $rc at ${t_exit}s"
[ "$rc" != 0 ] || fail "nvme-perf exited 0 although its controller was removed"
[ "$rc" != 101 ] || fail "nvme-perf panicked"
grep -qi "removed" /tmp/perf.err || fail "nvme-perf's error does not say the controller was removed"
# Removal without SIGBUS: on the device request the driver replaced the BAR mapping with
# all-ones memory before anything else touched the registers (nvme_vfio::Mmio::revoke).
grep -q "register window at .* revoked" /tmp/perf.err ||
    fail "nvme-perf did not revoke the register window on the removal request"


# When vfio-pci relayed the request: the first "Relaying device request" line of the kernel log
# for this function (hotplug.sh, earlier in the boot, removed another one).
t_req=$(dmesg | sed -n "s/^\[ *\([0-9.]*\)\].*$NVME_BDF.*Relaying device request.*/\1/p" | head -n1)
[ -n "$t_req" ] || { dmesg | tail -n 20; fail "no 'Relaying device request' in the kernel log"; }
ms=$(awk -v a="$t_req" -v b="$t_exit" 'BEGIN { printf "%d", (b - a) * 1000 }')
echo "device request at ${t_req}s, nvme-perf gone ${ms} ms later"
[ "$ms" -le 1000 ] || fail "nvme-perf took ${ms} ms (> 1 s) to let go after the device request"

# With the device released, the removal completes.
i=0
while [ -e "/sys/bus/pci/devices/$NVME_BDF" ]; do
    i=$((i + 1))
    [ "$i" -lt 100 ] || fail "$NVME_BDF still present 10 s after nvme-perf exited"
    sleep 0.1
done
echo "ok: $NVME_BDF removed; nvme-perf exited with $rc ${ms} ms after the device request"
