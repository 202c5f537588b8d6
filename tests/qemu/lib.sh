# Helpers for the guest test cases (busybox sh); a case loads them with `. /tests/lib.sh`.
# The cases run under `sh -e`: any failing command outside an if/||/&& ends the case.

# Hugepage memory a case reserves when it binds the controller, in MiB.
CASE_HUGEMEM=${CASE_HUGEMEM:-128}

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# Binds the test controller to vfio-pci.
bind_vfio() {
    PCI_ALLOWED=$NVME_BDF HUGEMEM=$CASE_HUGEMEM hugepage-setup.sh config
}

# What SPDK's environment (spdk_nvme_perf, SPDK's fio plugin) needs in this guest besides
# hugepages (the host scripts raise GUEST_HUGEPAGES): a writable /var/tmp (its PCI lock files),
# /var/run (DPDK's runtime directory), /dev/shm, and /tmp/openssl.cnf, an empty OpenSSL
# configuration for OPENSSL_CONF (SPDK's start-up loads one).
spdk_env_setup() {
    mkdir -p /var/tmp /var/run /dev/shm
    grep -q ' /dev/shm ' /proc/mounts || mount -t tmpfs tmpfs /dev/shm
    : >/tmp/openssl.cnf
}

# Gives the controller back to the kernel nvme driver and waits (~10 s) for its namespaces.
bind_kernel() {
    PCI_ALLOWED=$NVME_BDF hugepage-setup.sh reset
    i=0
    until [ "$(ls -d /sys/block/nvme*n* 2>/dev/null | wc -l)" -ge "$NVME_NS_COUNT" ]; do
        i=$((i + 1))
        [ "$i" -lt 100 ] || fail "the kernel nvme driver did not create $NVME_NS_COUNT namespaces within 10 s"
        sleep 0.1
    done
}

# Prints /dev/<block device> of namespace NSID under the kernel driver (the multipath head on a
# subsystem layout: the per-controller path disks nvme<S>c<C>n<N> have no /dev node).
ns_blockdev() {
    for b in /sys/block/nvme*n*; do
        case ${b##*/} in nvme*c*n*) continue ;; esac
        if [ "$(cat "$b/nsid")" = "$1" ]; then
            echo "/dev/${b##*/}"
            return 0
        fi
    done
    fail "no kernel block device for nsid $1"
}

# expect_fail "TEXT1;TEXT2" CMD ARGS...: CMD must exit non-zero but not with the Rust panic code
# (101), and its stderr must contain every TEXT (case-insensitive).
expect_fail() {
    texts=$1
    shift
    echo "+ $* (expected to fail)"
    set +e
    "$@" >/tmp/expect.out 2>/tmp/expect.err
    rc=$?
    set -e
    sed 's/^/    stderr: /' /tmp/expect.err
    [ "$rc" != 0 ] || fail "'$*' succeeded but should have failed"
    [ "$rc" != 101 ] || fail "'$*' panicked (exit 101) instead of reporting an error"
    [ "$rc" != 127 ] || fail "'$1' is not installed in the guest"
    old_ifs=$IFS
    IFS=';'
    for t in $texts; do
        grep -qiF -- "$t" /tmp/expect.err || { IFS=$old_ifs; fail "stderr of '$*' does not mention '$t'"; }
    done
    IFS=$old_ifs
    echo "    ok: exit $rc, mentions: $texts"
}

# ---- NVMe/TCP: the kernel's target (nvmet + nvmet-tcp) and host (nvme-tcp) on loopback, for
# nvmf-tcp.sh and nvmf-tcp-bench.sh.
NVMF_NQN=nqn.2026-01.test:sub1
NVMF_CFG=/sys/kernel/config/nvmet
NVMF_PORT=4420
# shellcheck disable=SC2034 # used by the cases that source this file
NVMF_TRID="trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:$NVMF_PORT subnqn:$NVMF_NQN"
# Namespace 1: a memory-backed null_blk device with 4 KiB blocks, this many GiB.
NVMF_NS1_GB=1
# shellcheck disable=SC2034 # as above
NVMF_NS1_SECTORS=$((NVMF_NS1_GB * 1024 * 2048))

# nvmf_target_up [NS2_MB]: brings loopback up, loads the modules and configures subsystem
# $NVMF_NQN through configfs: namespace 1 on /dev/nullb0 (memory-backed null_blk, 4 KiB
# blocks; or on $NVMF_NS1_DEV when set, e.g. the kernel nvme driver's block device), with
# NS2_MB also namespace 2 on /dev/loop0 over /tmp/ns2.img (NS2_MB MiB of zeroes, 512-byte
# blocks), any host allowed, port 1 on 127.0.0.1:$NVMF_PORT.
nvmf_target_up() {
    ns2_mb=${1:-}
    ns1_dev=${NVMF_NS1_DEV:-/dev/nullb0}
    ip link set lo up
    ip addr add 127.0.0.1/8 dev lo 2>/dev/null || true
    [ -n "${NVMF_NS1_DEV:-}" ] || modprobe null_blk nr_devices=1 bs=4096 gb=$NVMF_NS1_GB memory_backed=1
    modprobe nvmet
    modprobe nvmet-tcp
    grep -q configfs /proc/mounts || mount -t configfs none /sys/kernel/config
    [ -d "$NVMF_CFG" ] || fail "no $NVMF_CFG after loading nvmet"
    sub=$NVMF_CFG/subsystems/$NVMF_NQN
    mkdir "$sub"
    echo 1 >"$sub/attr_allow_any_host"
    mkdir "$sub/namespaces/1"
    printf "%s" "$ns1_dev" >"$sub/namespaces/1/device_path"
    echo 1 >"$sub/namespaces/1/enable"
    if [ -n "$ns2_mb" ]; then
        modprobe loop
        dd if=/dev/zero of=/tmp/ns2.img bs=1M count="$ns2_mb" 2>/dev/null
        losetup /dev/loop0 /tmp/ns2.img
        NVMF_LOOP=/dev/loop0
        mkdir "$sub/namespaces/2"
        printf /dev/loop0 >"$sub/namespaces/2/device_path"
        echo 1 >"$sub/namespaces/2/enable"
    fi
    mkdir "$NVMF_CFG/ports/1"
    echo ipv4 >"$NVMF_CFG/ports/1/addr_adrfam"
    echo tcp >"$NVMF_CFG/ports/1/addr_trtype"
    echo 127.0.0.1 >"$NVMF_CFG/ports/1/addr_traddr"
    echo $NVMF_PORT >"$NVMF_CFG/ports/1/addr_trsvcid"
    ln -s "$sub" "$NVMF_CFG/ports/1/subsystems/$NVMF_NQN"
}

# nvmf_target_down: removes what nvmf_target_up configured (the port link may already be gone).
nvmf_target_down() {
    sub=$NVMF_CFG/subsystems/$NVMF_NQN
    [ ! -L "$NVMF_CFG/ports/1/subsystems/$NVMF_NQN" ] || rm "$NVMF_CFG/ports/1/subsystems/$NVMF_NQN"
    rmdir "$NVMF_CFG/ports/1"
    for ns in "$sub"/namespaces/*; do
        echo 0 >"$ns/enable"
        rmdir "$ns"
    done
    rmdir "$sub"
    [ -z "${NVMF_LOOP:-}" ] || losetup -d "$NVMF_LOOP"
    NVMF_LOOP=""
}

# nvmf_host_available: loads the kernel's NVMe/TCP host (nvme-tcp); false where it is missing.
nvmf_host_available() {
    modprobe nvme-tcp 2>/dev/null && [ -e /dev/nvme-fabrics ]
}

# nvmf_host_connect SECTORS [OPTIONS]: connects the kernel's NVMe/TCP host to $NVMF_NQN on
# 127.0.0.1:$NVMF_PORT (both may be set to another subsystem first; OPTIONS:
# more nvme-fabrics options, e.g. ",nr_poll_queues=1") and prints the block device of the new
# namespace that has SECTORS 512-byte sectors, within 10 s (after nvmf_host_available).
nvmf_host_connect() {
    for b in /sys/block/nvme*; do echo "$b"; done >/tmp/nvmf-before
    echo "transport=tcp,traddr=127.0.0.1,trsvcid=$NVMF_PORT,nqn=$NVMF_NQN${2:-}" >/dev/nvme-fabrics
    i=0
    while [ "$i" -lt 100 ]; do
        for b in /sys/block/nvme*; do
            grep -qxF "$b" /tmp/nvmf-before && continue
            # With multipath the hidden per-path disk (nvmeXcYnZ) has no /dev node.
            if [ "$(cat "$b/size" 2>/dev/null)" = "$1" ] && [ -b "/dev/${b##*/}" ]; then
                echo "/dev/${b##*/}"
                return 0
            fi
        done
        sleep 0.1
        i=$((i + 1))
    done
    fail "the kernel NVMe/TCP host created no block device of $1 sectors for $NVMF_NQN"
}

# nvmf_host_disconnect: deletes the kernel host's controllers of $NVMF_NQN.
nvmf_host_disconnect() {
    for c in /sys/class/nvme/nvme*; do
        if [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$NVMF_NQN" ]; then echo 1 >"$c/delete_controller"; fi
    done
}

# peer LABEL CMD...: runs CMD (one benchmark run of one program), prefixing its output with
# "@@PEER LABEL " and ending with "@@PEER-END LABEL rc=N" for the host's report scripts
# (qd-ab.sh, fio-bench.sh); a failing CMD does not end the case.
peer() {
    label=$1
    shift
    set +e
    "$@" >/tmp/peer.out 2>&1
    rc=$?
    set -e
    sed "s/^/@@PEER $label /" /tmp/peer.out
    echo "@@PEER-END $label rc=$rc"
}

# nvme_target_start LOG NQN ARGS...: starts our nvme-target ($NVME_TARGET_BIN when set, e.g. a
# baseline build; run under `taskset -c $NVME_TARGET_CPUS` when that is set; ARGS: its
# arguments, the subsystem NQN among them) in the background with its output in LOG, sets
# TPID, and waits (20 s at most) until it reports that it serves NQN.
nvme_target_start() {
    tlog=$1
    tnqn=$2
    shift 2
    # Empty now: the background job truncates it only when it gets to run, and an earlier
    # target's "serving" line must not pass for this one's.
    : >"$tlog"
    if [ -n "${NVME_TARGET_CPUS:-}" ]; then
        taskset -c "$NVME_TARGET_CPUS" "${NVME_TARGET_BIN:-nvme-target}" "$@" >"$tlog" 2>&1 &
    else
        "${NVME_TARGET_BIN:-nvme-target}" "$@" >"$tlog" 2>&1 &
    fi
    TPID=$!
    i=0
    until grep -q "serving $tnqn" "$tlog"; do
        i=$((i + 1))
        [ "$i" -lt 200 ] || { cat "$tlog"; fail "nvme-target did not start within 20 s"; }
        kill -0 $TPID 2>/dev/null || { cat "$tlog"; fail "nvme-target exited"; }
        sleep 0.1
    done
}

# summ FIELD SIDE MODE FILE [KEY]: "median (min-max)" of column FIELD over the lines of FILE
# whose column 2 is SIDE, column 3 MODE and (with KEY) column 5 KEY (the SQLite benchmark cases'
# result files: one line per run or per phase of a run).
summ() {
    awk -v s="$2" -v m="$3" -v p="${5:-}" '$2 == s && $3 == m && (p == "" || $5 == p) { print $'"$1"' }' \
        "$4" | sort -n |
        awk '{ v[NR] = $1 } END { if (NR % 2) md = v[(NR + 1) / 2]; else md = (v[NR / 2] + v[NR / 2 + 1]) / 2;
              printf "%.3f (%.3f-%.3f)\n", md, v[1], v[NR] }'
}
