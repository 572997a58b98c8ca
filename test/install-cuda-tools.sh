#!/usr/bin/env bash
# Puts what CI needs to check the CUDA code on a Debian 12 machine without a
# GPU, and prints the folder that holds it on stdout:
#   include/  the headers the cuda-tagged Go code includes (cuda.h, nvrtc.h,
#             cublasLt.h), for `go vet -tags cuda`;
#   lib/      NVRTC (libnvrtc, libnvrtc-builtins), which compiles every kernel
#             module to PTX in `go test -tags nvrtc ./cuda/`;
#   cupti/include/  CUPTI's headers, which cuda/scripts/kerneltrace.c (the GPU
#             machine's kernel tracer) is compiled against in the same test.
#
# They come from Debian's CUDA 11.8 packages nvidia-cuda-dev, libnvrtc11.2,
# libnvrtc-builtins11.8 and libcupti-dev (in the non-free component, which this script enables
# when apt does not see it), unpacked into $LINGBOTMAP_CUDA_TOOLS (default
# /opt/lingbotmap/cuda): installing nvidia-cuda-dev would pull 64 packages and
# 2.8 GB, the NVIDIA driver library among them, and nothing here needs them.
# Run as root or with sudo; it waits for a running apt instead of failing.
set -euo pipefail
# shellcheck source=test/apt.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt.sh"
dest="${LINGBOTMAP_CUDA_TOOLS:-/opt/lingbotmap/cuda}"
say() { echo "install-cuda-tools: $*" >&2; }
have() {
  for f in include/cuda.h include/nvrtc.h include/cublasLt.h lib/libnvrtc.so lib/libnvrtc-builtins.so.11.8; do
    [ -e "$dest/$f" ] || return 1
  done
}
have_cupti() { [ -e "$dest/cupti/include/cupti_activity.h" ]; }
if have && have_cupti; then
  echo "$dest"
  exit 0
fi
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
if ! apt-cache policy nvidia-cuda-dev 2>/dev/null | grep -q 'Candidate: [0-9]'; then
  say "enabling Debian's contrib and non-free components (nvidia-cuda-dev lives there)"
  $SUDO tee /etc/apt/sources.list.d/lingbotmap-cuda.sources >/dev/null <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  say "apt-get update"
  apt_get update
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 0777 "$work" # apt-get download runs as _apt
if ! have_cupti; then
  say "downloading libcupti-dev (about 8 MB, for its headers)"
  (cd "$work" && apt_get download libcupti-dev)
  mkdir -p "$work/cupti"
  dpkg-deb --fsys-tarfile "$work"/libcupti-dev_*.deb | tar -x -C "$work/cupti" ./usr/include
  $SUDO mkdir -p "$dest/cupti"
  $SUDO rm -rf "$dest/cupti/include"
  $SUDO mv "$work/cupti/usr/include" "$dest/cupti/include"
  have_cupti || { say "libcupti-dev lacked cupti_activity.h"; exit 1; }
fi
if have; then
  echo "$dest"
  exit 0
fi
say "downloading nvidia-cuda-dev (about 770 MB, for its headers), libnvrtc11.2 and libnvrtc-builtins11.8"
(cd "$work" && apt_get download nvidia-cuda-dev libnvrtc11.2 libnvrtc-builtins11.8)
mkdir -p "$work/x"
dpkg-deb --fsys-tarfile "$work"/nvidia-cuda-dev_*.deb | tar -x -C "$work/x" ./usr/include
dpkg-deb -x "$work"/libnvrtc11.2_*.deb "$work/x"
dpkg-deb -x "$work"/libnvrtc-builtins11.8_*.deb "$work/x"
mkdir -p "$work/x/lib"
cp -a "$work"/x/usr/lib/x86_64-linux-gnu/libnvrtc* "$work/x/lib/"
ln -sf libnvrtc.so.11.2 "$work/x/lib/libnvrtc.so" # the link name -lnvrtc looks for
$SUDO mkdir -p "$dest"
$SUDO rm -rf "$dest/include" "$dest/lib"
$SUDO mv "$work/x/usr/include" "$dest/include"
$SUDO mv "$work/x/lib" "$dest/lib"
have || { say "the packages lacked cuda.h, nvrtc.h, cublasLt.h or libnvrtc"; exit 1; }
say "CUDA $(sed -n 's/^#define CUDA_VERSION \([0-9]*\).*/\1/p' "$dest/include/cuda.h") headers and NVRTC in $dest"
echo "$dest"
