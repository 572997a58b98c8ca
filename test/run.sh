#!/usr/bin/env bash
# Runs the whole test suite on the CPU: installs the ROS 1 tools, DDS stacks
# and peers the integration tests use (test/install-deps.sh), then vets and
# tests every package, and the ROS 2 code with the ros2 build tag. The tests
# start their own private roscore, or private network namespace, per test;
# no GPU is needed.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
test/install-deps.sh
go version
go vet ./...
go vet -tags ros2 ./...
# The cuda-tagged code is vetted against Debian's CUDA headers, and every kernel
# module compiled by Debian's NVRTC (no GPU needed); cuda/compat comes first,
# as on the GPU machine.
cuda_tools=$(test/install-cuda-tools.sh)
CGO_CFLAGS="-I$PWD/cuda/compat -I$cuda_tools/include" go vet -tags cuda ./...
CGO_CFLAGS="-I$PWD/cuda/compat -I$cuda_tools/include" go vet -tags cuda,cudadev ./cuda/...
CGO_CFLAGS="-I$cuda_tools/include" CGO_LDFLAGS="-L$cuda_tools/lib" LD_LIBRARY_PATH="$cuda_tools/lib" \
  go test -count=1 -tags nvrtc -run 'TestKernelsCompile|TestKernelTraceBuilds' ./cuda/
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
go test -count=1 -timeout 25m ./...

# ROS 2: the transport links Cyclone DDS (build tag ros2). Its tests, bag play
# over DDS and the node's end-to-end tests against the independent peers of
# test/ros2peers (built once into ~/.cache/lingbotmap/ros2peers/<hash>) each re-run
# their test binary inside ../shared/tools/netns-run.sh, a private network
# namespace with only loopback: no DDS packet leaves the machine.
bash test/ros2peers/build.sh >/dev/null
go test -count=1 -timeout 10m -tags ros2 ./node/ros2/... ./node/bagplay/
go test -count=1 -timeout 15m -tags ros2 -run '^(TestROS2|TestJazzy)' ./test/
