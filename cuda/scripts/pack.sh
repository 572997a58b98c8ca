#!/usr/bin/env bash
# Prepares the git-ignored folders that cuda/scripts/run.sh carries to a GPU
# machine (keep them out of git: /.gpu/ and /.ref/ in .git/info/exclude):
#   .gpu  the packed Go toolchain, the vendored modules (compressed, to stay
#         under the transfer limit), the vet tool, and the golden cases with
#         the tiny model's weights as golden.tar.xz (--golden CASE for one)
#   .ref  with --ref, the reference's Python sources and make_golden.py
#
#   cuda/scripts/pack.sh [--golden CASE|all|none] [--ref LINGBOT_MAP_GIT_DIR]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
shared=${SHARED:-../shared}
golden=all ref=""
while [ $# -gt 0 ]; do
  case $1 in
    --golden) golden=$2; shift 2 ;;
    --ref) ref=$2; shift 2 ;;
    *) echo "usage: $0 [--golden CASE|all|none] [--ref LINGBOT_MAP_GIT_DIR]" >&2; exit 2 ;;
  esac
done
"$shared"/tools/pack-go-for-gpu.sh .gpu
tar -C .gpu -cJf .gpu/vendor.tar.xz vendor && rm -rf .gpu/vendor
# go test and go vet need the vet tool, which the packed toolchain leaves out.
tar -C "$(go env GOTOOLDIR)" -cJf .gpu/tools.tar.xz vet
rm -rf .gpu/golden .gpu/golden.tar.xz
if [ "$golden" != none ]; then
  cases=$golden
  [ "$golden" = all ] && cases="stream_kf1 stream_kf2 stream_flow windowed_kf2 images_kf1"
  files=(weights.safetensors)
  for c in $cases; do files+=("$c/inputs.safetensors" "$c/outputs.safetensors" "$c/manifest.json"); done
  # xz saves ~5 MB of the 64 MiB a call may carry.
  tar -C "$shared/golden" -cf - "${files[@]}" | xz -T2 -6 >.gpu/golden.tar.xz
fi
if [ -n "$ref" ]; then
  rm -rf .ref && mkdir -p .ref/lingbot-map
  git --git-dir="$ref" archive HEAD lingbot_map demo.py pyproject.toml | tar -x -C .ref/lingbot-map
  cp "$shared/tools/make_golden.py" .ref/
fi
du -sh .gpu/* .ref 2>/dev/null
