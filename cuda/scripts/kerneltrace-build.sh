#!/usr/bin/env bash
# Builds kerneltrace.c against the CUPTI headers in INCLUDE (and the CUDA
# headers in CUDA_INCLUDE, default INCLUDE) with the newest activity record
# layouts that CUPTI declares. With LIBCUPTI, links the injection library
# OUT (run.sh's ktrace stage, on the GPU machine); without it, only compiles
# (CI's check, against Debian's CUPTI headers).
#   kerneltrace-build.sh INCLUDE [LIBCUPTI OUT]
set -euo pipefail
inc=$1 lib=${2:-} out=${3:-}
src="$(dirname "${BASH_SOURCE[0]}")/kerneltrace.c"
newest() {
  cat "$inc"/cupti*.h | grep -oE "\} CUpti_Activity$1[0-9]+;" | grep -oE "$1[0-9]+" | sort -V | tail -1 || true
}
k=$(newest Kernel) m=$(newest Memcpy) s=$(newest Memset)
[ -n "$k" ] && [ -n "$m" ] && [ -n "$s" ] || { echo "kerneltrace-build: no activity records declared in $inc" >&2; exit 1; }
flags=(-O2 -Wall -fPIC -I"$inc" -I"${CUDA_INCLUDE:-$inc}"
  -DKERNEL_REC="CUpti_Activity$k" -DMEMCPY_REC="CUpti_Activity$m" -DMEMSET_REC="CUpti_Activity$s")
if [ -z "$lib" ]; then
  gcc "${flags[@]}" -Werror -c -o /dev/null "$src"
else
  gcc "${flags[@]}" -shared -o "$out" "$src" "$lib" -lpthread
fi
echo "$k $m $s"
