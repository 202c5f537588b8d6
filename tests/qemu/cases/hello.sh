# nvme-hello (write a string, read it back) must print "Hello world".
. /tests/lib.sh

bind_vfio
nvme-hello "$NVME_BDF" | tee /tmp/hello.out
grep -q "Hello world" /tmp/hello.out || fail "nvme-hello did not print 'Hello world'"
