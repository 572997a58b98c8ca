#!/usr/bin/env bash
# Runs the whole test suite on the CPU: installs the ROS tools the integration
# tests use (test/install-deps.sh), then vets and tests every package.
# The tests start their own private roscore per test; no GPU is needed.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
test/install-deps.sh
go version
go vet ./...
# The cuda-tagged code is vetted against Debian's CUDA headers, and every kernel
# module compiled by Debian's NVRTC (no GPU needed); cuda/compat comes first,
# as on the GPU machine.
cuda_tools=$(test/install-cuda-tools.sh)
CGO_CFLAGS="-I$PWD/cuda/compat -I$cuda_tools/include" go vet -tags cuda ./...
CGO_CFLAGS="-I$PWD/cuda/compat -I$cuda_tools/include" go vet -tags cuda,cudadev ./cuda/...
CGO_CFLAGS="-I$cuda_tools/include" CGO_LDFLAGS="-L$cuda_tools/lib" LD_LIBRARY_PATH="$cuda_tools/lib" \
  go test -count=1 -tags nvrtc -run TestKernelsCompile ./cuda/
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
go test -count=1 -timeout 25m ./...

# ---- ROS 2 (h4-ros2test; the lead finalises this block) ----
# The ROS 2 tests need the binary built with -tags ros2 and the independent
# peers of test/ros2peers (built into ~/.cache/lingbotmap/ros2peers, cached);
# each test re-runs itself inside ../shared/tools/netns-run.sh (root needed).
go vet -tags ros2 ./test/
bash test/ros2peers/build.sh >/dev/null
go test -count=1 -timeout 10m -tags ros2 -run '^TestROS2' ./test/
