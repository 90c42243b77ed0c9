#!/bin/bash
# Build-time check of warden/jail-gpu (run as its last step; the image fails to build otherwise):
#  - no NVIDIA driver user-space file anywhere in the image's system directories: each GPU worker shows
#    its node's own to job steps (images/worker/warden-driver.sh, same names): libcuda.so*,
#    libcudadebugger.so*, libnvidia-*.so* (ml, ptxjitcompiler, nvvm, gpucomp, ...), libnvcuvid.so*,
#    nvidia-smi and the driver's other programs. The jail's own /usr/bin/nvidia-smi is a stub script
#    (jail/setup.sh) that GPU workers bind their node's over: allowed;
#  - all_reduce_perf finds every library it links (libcudart, libnccl) and prints its usage.
# tests/dataplane/test_gpu_jail.py checks the same from outside the image.
set -euo pipefail
fail() { echo "check-gpu-jail: $*" >&2; exit 1; }

found="$(find /usr /lib /lib64 /opt /etc /bin /sbin /var -xdev \
    \( -name 'libcuda.so*' -o -name 'libcudadebugger.so*' -o -name 'libnvidia-*.so*' -o -name 'libnvcuvid.so*' \
       -o -name nvidia-smi -o -name nvidia-debugdump -o -name 'nvidia-cuda-mps-*' \) \
    -print 2>/dev/null || true)"
stub=/usr/bin/nvidia-smi
if grep -qx "$stub" <<<"$found" && [ "$(head -c 2 "$stub")" = '#!' ] && grep -q 'no NVIDIA driver' "$stub"; then
    found="$(grep -vx "$stub" <<<"$found" || true)"
fi
[ -z "$found" ] || fail "NVIDIA driver files in the jail (the node brings its own):"$'\n'"$found"

bin=/usr/local/bin/all_reduce_perf
[ -x "$bin" ] || fail "$bin missing"
# ldd's output read once: `ldd | grep -q` fails under pipefail when grep stops reading first (SIGPIPE)
libs="$(ldd "$bin")"
missing="$(grep 'not found' <<<"$libs" || true)"
[ -z "$missing" ] || fail "all_reduce_perf lacks libraries:"$'\n'"$missing"
grep -q 'libnccl\.so\.2 => /' <<<"$libs" || fail "all_reduce_perf does not link libnccl.so.2:"$'\n'"$libs"
out="$("$bin" -h)" || fail "all_reduce_perf -h exited $?"
grep -q '^USAGE: all_reduce_perf' <<<"$out" || fail "all_reduce_perf -h printed no usage:"$'\n'"$out"
echo "check-gpu-jail: OK (no driver files; all_reduce_perf links $(grep -oE 'lib(nccl|cudart)\.so\.[0-9]+' <<<"$libs" | sort -u | tr '\n' ' '))"
