# nvme-admin (ours, through vfio-pci) against nvme-cli (on the kernel nvme driver) on the same
# controller: id-ctrl, id-ns, smart-log, list-ns, ns-descs, fw-log, effects-log and get-feature
# values compared field by field by guest-check admin; admin-passthru and io-passthru bytes
# compared with nvme-cli's admin-passthru and io-passthru. Without nvme-cli in the guest
# (run.sh copies the host's /usr/sbin/nvme when installed), the comparison falls back to sysfs.
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
# Firmware Image Download / Firmware Commit (issue 21 item 5): QEMU 7.2's controller lacks
# them (Identify Controller OACS bit 2 clear), so both are refused before anything is sent,
# with a non-zero exit status, and the Firmware Slot log is unchanged.
dd if=/dev/zero of="$d/fw.bin" bs=4096 count=4 2>/dev/null
expect_fail "Firmware Image Download;OACS bit 2;nothing was sent" \
    nvme-admin fw-download "$NVME_BDF" -f "$d/fw.bin" -x 4096
expect_fail "Firmware Commit;OACS bit 2;nothing was sent" \
    nvme-admin fw-commit "$NVME_BDF" -s 1 -a 2
expect_fail "Firmware Commit;OACS bit 2" nvme-admin fw-commit "$NVME_BDF" -s 2 -a 3 -o json
nvme-admin fw-log "$NVME_BDF" -o json >"$d/ours-fw-log-after.json"
cmp "$d/ours-fw-log.json" "$d/ours-fw-log-after.json" ||
    fail "fw-log changed after the refused firmware commands"
echo "admin.sh: fw-download and fw-commit refused (OACS bit 2 clear), fw-log unchanged"
head -20 "$d/ours-id-ctrl.json"
# admin-passthru: Identify Controller and the SMART log (Get Log Page 02h, 128 dwords) as raw
# bytes, compared with nvme-cli's admin-passthru on the kernel driver below.
nvme-admin admin-passthru "$NVME_BDF" -O 6 --cdw10 1 -l 4096 -r -b >"$d/ours-pt-id-ctrl.bin"
nvme-admin admin-passthru "$NVME_BDF" -O 2 -n 0xffffffff --cdw10 0x007f0002 -l 512 -r -b \
    >"$d/ours-pt-smart.bin"
expect_fail "refused" nvme-admin admin-passthru "$NVME_BDF" -O 1
expect_fail "at least 4096" nvme-admin admin-passthru "$NVME_BDF" -O 6 --cdw10 1 -l 512
# io-passthru: a 4 KiB pattern written at LBA $pt_lba of namespace 1 (Write, opcode 1) and read
# back (Read, opcode 2) through our passthrough; nvme-cli's io-passthru reads it on the kernel
# driver below.
pt_lba=200
bs=$(nvme-admin list "$NVME_BDF" -o json | grep -m1 '"SectorSize"' | tr -dc 0-9)
pt_nlb0=$((4096 / bs - 1))
head -c 4096 /dev/urandom >"$d/pt-pattern.bin"
nvme-admin io-passthru "$NVME_BDF" -O 1 -n 1 --cdw10 "$pt_lba" --cdw12 "$pt_nlb0" -l 4096 -w \
    -i "$d/pt-pattern.bin"
nvme-admin io-passthru "$NVME_BDF" -O 2 -n 1 --cdw10 "$pt_lba" --cdw12 "$pt_nlb0" -l 4096 -r -b \
    >"$d/ours-pt-read.bin"
cmp "$d/pt-pattern.bin" "$d/ours-pt-read.bin" ||
    fail "io-passthru Read did not return what io-passthru Write wrote"
expect_fail "at least 4096" nvme-admin io-passthru "$NVME_BDF" -O 2 -n 1 --cdw12 "$pt_nlb0" -l 4095
expect_fail "submit_raw" nvme-admin io-passthru "$NVME_BDF" -O 0x0d -n 1 -l 4096
echo "admin.sh: io-passthru Write/Read round trip of $((pt_nlb0 + 1)) blocks of $bs bytes"

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
    # nvme-cli 2.3 spells the opcode -o (ours: -O, -o is the output format): the long name.
    nvme admin-passthru "$dev" --opcode 6 --cdw10 1 -l 4096 -r -b >"$d/kernel-pt-id-ctrl.bin"
    nvme admin-passthru "$dev" --opcode 2 -n 0xffffffff --cdw10 0x007f0002 -l 512 -r -b \
        >"$d/kernel-pt-smart.bin"
    cmp "$d/ours-pt-id-ctrl.bin" "$d/kernel-pt-id-ctrl.bin" ||
        fail "admin-passthru Identify Controller differs from nvme-cli's"
    # SMART bytes 0-31 (warning, temperature, spare, used) and 192-511 (media errors onwards,
    # temperatures) must match; 32-191 are counters the commands in between move (data
    # units, host commands, busy time, power cycles and hours, unsafe shutdowns, media and
    # error-log entry counts: the kernel's probe may log an error entry).
    for f in ours kernel; do
        dd if="$d/$f-pt-smart.bin" bs=32 count=1 2>/dev/null >"$d/$f-pt-smart.head"
        dd if="$d/$f-pt-smart.bin" bs=32 skip=6 2>/dev/null >"$d/$f-pt-smart.tail"
    done
    for part in head tail; do
        cmp "$d/ours-pt-smart.$part" "$d/kernel-pt-smart.$part" ||
            fail "admin-passthru SMART log ($part) differs from nvme-cli's outside the counters"
    done
    echo "admin.sh: admin-passthru Identify and SMART match nvme-cli's"
    nvme io-passthru "$(ns_blockdev 1)" --opcode 2 --namespace-id 1 --cdw10 "$pt_lba" \
        --cdw12 "$pt_nlb0" --data-len 4096 --read --raw-binary >"$d/kernel-pt-read.bin"
    cmp "$d/pt-pattern.bin" "$d/kernel-pt-read.bin" ||
        fail "nvme-cli io-passthru on the kernel driver does not read what our io-passthru wrote"
    echo "admin.sh: nvme-cli io-passthru reads the bytes our io-passthru wrote"
else
    echo "admin.sh: nvme-cli is not in the guest; comparing with sysfs"
    guest-check admin "$d" --sysfs /sys
fi
# The kernel's block device holds the same bytes at the same LBA.
dd if="$(ns_blockdev 1)" bs="$bs" skip="$pt_lba" count=$((pt_nlb0 + 1)) 2>/dev/null \
    >"$d/kernel-dd-read.bin"
cmp "$d/pt-pattern.bin" "$d/kernel-dd-read.bin" ||
    fail "the kernel block device does not hold what our io-passthru wrote"
