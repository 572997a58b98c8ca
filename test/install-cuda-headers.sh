#!/usr/bin/env bash
# Puts the CUDA headers that the cuda-tagged Go code includes (cuda.h,
# nvrtc.h, cublasLt.h) on a Debian 12 machine without a GPU, so that CI can
# `go vet -tags cuda`, and prints their include directory on stdout.
#
# The headers come from Debian's nvidia-cuda-dev (CUDA 11.8, in the non-free
# component, which this script enables when apt does not see it). Only the
# package's usr/include is unpacked, into $LINGBOTMAP_CUDA_HEADERS (default
# /opt/lingbotmap/cuda-headers): installing the package would pull 64
# packages and 2.8 GB, the NVIDIA driver library among them, and vet needs
# none of it (cgo compiles against the headers and links nothing).
# Run as root or with sudo; it waits for a running apt instead of failing.
set -euo pipefail
dest="${LINGBOTMAP_CUDA_HEADERS:-/opt/lingbotmap/cuda-headers}"
say() { echo "install-cuda-headers: $*" >&2; }
have() { for h in cuda.h nvrtc.h cublasLt.h; do [ -f "$dest/include/$h" ] || return 1; done; }
if have; then
  echo "$dest/include"
  exit 0
fi
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
apt_opts=(-q -o DPkg::Lock::Timeout=900)
if ! apt-cache policy nvidia-cuda-dev 2>/dev/null | grep -q 'Candidate: [0-9]'; then
  say "enabling Debian's contrib and non-free components (nvidia-cuda-dev lives there)"
  $SUDO tee /etc/apt/sources.list.d/lingbotmap-cuda-headers.sources >/dev/null <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  say "apt-get update (waits while another apt holds the lock)"
  until $SUDO apt-get "${apt_opts[@]}" update >&2; do
    say "apt-get update failed (another apt running?); trying again in 10 s"
    sleep 10
  done
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 0777 "$work" # apt-get download runs as _apt
say "downloading nvidia-cuda-dev (about 770 MB) for its headers"
(cd "$work" && apt-get "${apt_opts[@]}" download nvidia-cuda-dev >&2)
deb=$(ls "$work"/nvidia-cuda-dev_*.deb)
mkdir -p "$work/x"
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$work/x" ./usr/include
$SUDO mkdir -p "$dest"
$SUDO rm -rf "$dest/include"
$SUDO mv "$work/x/usr/include" "$dest/include"
have || { say "nvidia-cuda-dev did not have cuda.h, nvrtc.h and cublasLt.h"; exit 1; }
say "CUDA $(sed -n 's/^#define CUDA_VERSION \([0-9]*\).*/\1/p' "$dest/include/cuda.h") headers in $dest/include"
echo "$dest/include"
