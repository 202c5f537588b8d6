# nvme-admin (ours, through vfio-pci) against nvme-cli (on the kernel nvme driver) on the same
# controller: id-ctrl, id-ns, smart-log, list-ns, ns-descs, fw-log, effects-log and get-feature
# values compared field by field by guest-check admin. Without nvme-cli in the guest (run.sh
# copies the host's /usr/sbin/nvme when installed), the comparison falls back to sysfs.
# shellcheck source=/dev/null # the guest path of tests/qemu/lib.sh
. /tests/lib.sh

d=/tmp/admin
rm -rf "$d"
mkdir -p "$d"
features="1 2 4 6 8"

bind_vfio
nvme-admin id-ctrl "$NVME_BDF" -o json >"$d/ours-id-ctrl.json"
nvme-admin id-ns "$NVME_BDF" -n 1 -o json >"$d/ours-id-ns.json"
nvme-admin smart-log "$NVME_BDF" -o json >"$d/ours-smart-log.json"
nvme-admin list-ns "$NVME_BDF" -o json >"$d/ours-list-ns.json"
nvme-admin ns-descs "$NVME_BDF" -n 1 -o json >"$d/ours-ns-descs.json"
nvme-admin fw-log "$NVME_BDF" -o json >"$d/ours-fw-log.json"
nvme-admin effects-log "$NVME_BDF" -o json >"$d/ours-effects-log.json"
for f in $features; do
    nvme-admin get-feature "$NVME_BDF" -f "$f" -o json >"$d/ours-feature-$f.json"
done
# The rest of the subcommands run and print (values checked by the emulator tests).
nvme-admin list "$NVME_BDF"
cat "$d/ours-fw-log.json"
nvme-admin error-log "$NVME_BDF" -e 4 -o json
nvme-admin get-feature "$NVME_BDF" -f 6 -s 3
nvme-admin get-feature "$NVME_BDF" -f 0xe -o json
nvme-admin set-feature "$NVME_BDF" -f 6 -v 1
# Bad input: a feature nvme-admin does not type, a value too wide for it.
expect_fail "not one nvme-admin types" nvme-admin get-feature "$NVME_BDF" -f 3
expect_fail "does not fit" nvme-admin set-feature "$NVME_BDF" -f 6 -v 0x100000000
head -20 "$d/ours-id-ctrl.json"

bind_kernel
if command -v nvme >/dev/null 2>&1; then
    ctrl=$(ls "/sys/bus/pci/devices/$NVME_BDF/nvme")
    dev=/dev/$ctrl
    echo "nvme-cli: $(nvme version | head -1), device $dev"
    nvme id-ctrl "$dev" -o json >"$d/kernel-id-ctrl.json"
    nvme id-ns "$dev" -n 1 -o json >"$d/kernel-id-ns.json"
    nvme smart-log "$dev" -o json >"$d/kernel-smart-log.json"
    nvme list-ns "$dev" -o json >"$d/kernel-list-ns.json"
    nvme ns-descs "$dev" -n 1 -o json >"$d/kernel-ns-descs.json"
    nvme fw-log "$dev" -o json >"$d/kernel-fw-log.json" || fail "nvme fw-log failed"
    # --csi 0: without it nvme-cli maps BAR0 to read CAP.CSS (the NVM command set only here).
    nvme effects-log "$dev" --csi=0 -o json >"$d/kernel-effects-log.json"
    for f in $features; do
        nvme get-feature "$dev" -f "$f" >"$d/kernel-feature-$f.txt"
        cat "$d/kernel-feature-$f.txt"
    done
    guest-check admin "$d"
else
    echo "admin.sh: nvme-cli is not in the guest; comparing with sysfs"
    guest-check admin "$d" --sysfs /sys
fi
