# Hot-add and hot-remove of a second controller while the first keeps working (needs
# `run.sh --hotplug`: a free pcie-root-port hp1, and the host carrying out "@@HOST device_add
# hp1" / "@@HOST device_del hp1" over QMP). nvme-hotplug reads from every controller on
# vfio-pci and attaches new ones from the kernel's uevents (nvme_device::HotplugMonitor):
# the hot-added controller must be attached and read from, and after its device_del
# (attention button, device request, our release, removal) be detached, while the first
# controller's IOPS never drop to zero and it ends without an error. Runs before
# hot-unplug.sh, which removes the first controller.
# shellcheck disable=SC1091 # /tests/lib.sh exists in the guest only
. /tests/lib.sh

OUT=/tmp/hotplug.out
ERR=/tmp/hotplug.err
STOP=/tmp/hotplug.stop

# wait_line PATTERN SECONDS WHAT: waits for a line matching PATTERN (grep -E) in $OUT.
wait_line() {
    i=0
    until grep -Eq "$1" "$OUT"; do
        i=$((i + 1))
        kill -0 "$pid" 2>/dev/null || { cat "$OUT" "$ERR"; fail "nvme-hotplug ended while waiting for $3"; }
        [ "$i" -lt $(($2 * 10)) ] || { tail -n 20 "$OUT"; tail -n 20 "$ERR"; dmesg | tail -n 20; fail "no $3 within $2 s"; }
        sleep 0.1
    done
}

# The NVMe functions other than the first controller.
other_nvme() {
    for d in /sys/bus/pci/devices/*; do
        [ "$(cat "$d/class" 2>/dev/null)" = 0x010802 ] || continue
        [ "${d##*/}" = "$NVME_BDF" ] || echo "${d##*/}"
    done
}

[ -z "$(other_nvme)" ] || fail "a second NVMe function exists before the hot-add: $(other_nvme)"
bind_vfio
rm -f "$STOP"
echo "+ nvme-hotplug -t 600 --stop-file $STOP (in the background)"
nvme-hotplug -t 600 --stop-file "$STOP" >"$OUT" 2>"$ERR" &
pid=$!
wait_line "^attach $NVME_BDF" 30 "attach of $NVME_BDF"
wait_line "^iops t=[0-9]+ $NVME_BDF=[1-9]" 30 "IOPS on $NVME_BDF"

echo "@@HOST device_add hp1"
i=0
until [ -n "$(other_nvme)" ]; do
    i=$((i + 1))
    [ "$i" -lt 300 ] || { dmesg | tail -n 20; fail "no second NVMe function 30 s after device_add"; }
    sleep 0.1
done
NEW=$(other_nvme | head -n1)
echo "hot-added controller at $NEW"
# No udev in the guest: bind it to vfio-pci here (the kernel's nvme driver may have taken it).
PCI_ALLOWED=$NEW HUGEMEM=$CASE_HUGEMEM hugepage-setup.sh config >/tmp/bind.out 2>&1 ||
    { cat /tmp/bind.out; fail "binding $NEW to vfio-pci failed"; }
wait_line "^attach $NEW" 30 "attach of $NEW"
# Three reports with reads on the new controller.
i=0
until [ "$(grep -Ec "^iops .* $NEW=[1-9]" "$OUT")" -ge 3 ]; do
    i=$((i + 1))
    [ "$i" -lt 300 ] || { tail -n 20 "$OUT"; fail "no reads on $NEW within 30 s of its attach"; }
    sleep 0.1
done
grep -E "^attach $NEW" "$OUT"

echo "@@HOST device_del hp1"
wait_line "^detach $NEW" 60 "detach of $NEW after device_del"
i=0
while [ -e "/sys/bus/pci/devices/$NEW" ]; do
    i=$((i + 1))
    [ "$i" -lt 300 ] || { dmesg | tail -n 20; fail "$NEW still present 30 s after its detach"; }
    sleep 0.1
done
echo "$NEW removed"
# The first controller goes on after the removal: two more reports with reads on it.
n=$(grep -c '^iops ' "$OUT")
i=0
until [ "$(grep -c '^iops ' "$OUT")" -ge $((n + 2)) ]; do
    i=$((i + 1))
    [ "$i" -lt 200 ] || fail "no IOPS reports after the removal"
    sleep 0.1
done
touch "$STOP"
rc=0
wait "$pid" || rc=$?
grep -E '^(attach|detach|removed|stopped|summary|rescan)' "$OUT" | sed 's/^/    /'
sed 's/^/    stderr: /' "$ERR" | tail -n 5
[ "$rc" = 0 ] || fail "nvme-hotplug exited with $rc"
grep -Eq "^summary $NVME_BDF ios=[1-9][0-9]* end=running" "$OUT" ||
    fail "the first controller did not run to the end without an error"
grep -Eq "^summary $NEW ios=[1-9][0-9]* end=removed" "$OUT" ||
    fail "the hot-added controller did not end as removed after reads"
# Once reading, the first controller is in every report, never at zero.
bad=$(awk -v a="$NVME_BDF" '/^iops / {
        v = ""
        for (i = 3; i <= NF; i++) if (index($i, a "=") == 1) v = substr($i, length(a) + 2)
        if (v + 0 > 0) seen = 1
        else if (seen) print
    }' "$OUT" | head -n 3)
[ -z "$bad" ] || fail "the first controller stalled: $bad"
echo "ok: $NEW hot-added, attached, read and detached; $NVME_BDF never stopped ($(grep -c '^iops ' "$OUT") reports)"
