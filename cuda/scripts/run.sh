#!/usr/bin/env bash
# Builds, tests and times the CUDA backend on a GPU machine that has the CUDA
# toolkit but no Go (the Go toolchain and vendored modules come packed in .gpu,
# see cuda/scripts/pack.sh). Run from anywhere; logs go to $OUT (default out/gpu).
#
#   cuda/scripts/run.sh [STAGE...]     run in the order given; stages: info build
#                                     test bench verify (= verify-bf16 verify-fp32)
#                                     verify-fp8 benchcmd ref peak profile sanitize
#                                     ncu wgcheck golden-sized pipeline long runfolder
#                                     smallgpu reach coldstart ktrace
#                                     (default: info build test bench)
#   TEST_RUN=regexp   go test -run filter (default: all tests); TEST_SKIP=regexp -skip
#   SANITIZE_RUN=re   tests for the 'sanitize' stage (compute-sanitizer memcheck)
#   NCU_KERNEL=name   kernel for the 'ncu' stage (default attn_fa2_paged_bf), profiled
#   NCU_BENCH=re      inside this benchmark (default PagedAttention/fa2); NCU_RAW=1 prints
#                     every metric (--page raw) and sums up the pipes and stall reasons
#   BENCH=regexp      go test -bench filter (default: all benchmarks)
#   GOLDEN="dir..."   golden cases for 'verify' (default: every case in .gpu/golden)
#   BENCH_FRAMES=n    streaming frames for benchcmd after 8 scale frames (default 22)
#   BENCH_ARGS="..."  more flags for the bench command in benchcmd and profile
#   BENCH_TIMEOUT=s   limit for benchcmd (default 200)
#   WGCHECK_VARIANTS="-DX;-DY=2"  'wgcheck' also builds and times these variants (nvcc flags; the
#                     kernels' stage counts are fixed, see cuda/dev/README.md)
#   WGCHECK_NCU=1     'wgcheck' also runs Nsight Compute on the full-size launch
#   WGCHECK_NCU_KERNEL=name  its kernel (default attn_tma3_paged_bf)
#   WGCHECK_NCU_BUILD=i      profile the i-th build (1: the default, 2: the first variant, ...)
#   WG_ONLY_TMA=1     'wgcheck' times only the TMA kernel at full size
#   WG_SPLITS="1 4"   key splits the TMA kernel is timed at in 'wgcheck' (default 1)
#   WG_TMA3=1         'wgcheck' runs its TMA cases on attn_tma3_paged_bf
#   KTRACE_SPECS="name flags;..."  bench runs of the 'ktrace' stage (default: bf16 and fp8, graphs on
#                     and off); KTRACE_FRAMES=n frames each (164), KTRACE_N=n the last whole frames
#                     counted (60), KTRACE_KEEP=1 keeps the records (xz) in $OUT, KTRACE_GAPS=n
#                     lists the n largest kinds of host gaps (default 10)
#   REF_FRAMES=n      frames for the reference timing in 'ref' (default 30; more
#                     than 8 + 64 to time frames with a full cache; needs
#                     .ref/make_golden.py and .ref/lingbot-map, see pack.sh)
#   PIPE_FRAMES=n     frames of each 'pipeline' run (default 1000; PIPE_WARMUP
#                     of them, default 64, left out of the figures; PIPE_378=0
#                     leaves out the 640×468 run, PIPE_ALT="flags;flags" adds a
#                     paced run for each other setting); LONG_FRAMES=n
#                     frames of the 'long' run (default 10000); RUN_FRAMES=n
#                     frames of the 'runfolder' input (default 1000); PIPE_BIG=0
#                     leaves out the 1280×720 PNG run; PIPE_TRACE=1 records a Go
#                     execution trace and CPU profile of PIPE_TRACE_S seconds
#                     (default 5) of each pipeline run into $OUT; PIPE_ARGS="..."
#                     more flags for every pipeline run
#   COLD_FRAMES=n     'coldstart': frames of its paced run (default 500); COLD_PRECISION
#                     its precision (default fp8)
#   REACH_LONG=n      'reach': frames of the long fp8 run (default 1000; 0 skips it)
#   REACH_SPECS="name precision arch [flags];..."  'reach': the runs (default bf16, fp8 and
#                     bf16 and fp8 compiled for sm_80); flags go to bench, e.g.
#                     "fp8-poly1 fp8 auto --cuda-attn-exp-poly 1"
#   SIZED_HW=HxW      'golden-sized': input size of the cases it makes with the
#                     reference and then verifies (default 224x294: 336-token
#                     pages, so the TMA paged kernels run; needs .ref)
#   ARCH=sm_80        compile the kernels for this target (the setting cuda.arch,
#                     LINGBOTMAP_CUDA_ARCH) in every stage that runs the backend:
#                     test, verify, benchcmd, profile, golden-sized. Below sm_90
#                     the Hopper kernels and PDL are off and the portable
#                     mma.sync / cp.async kernels run, as on an A100, RTX 30/40
#                     or Jetson Orin; the summary and logs are marked with it.
#                     The portable path's proof in one call:
#                       ARCH=sm_80 BENCH_FRAMES=164 BENCH_ARGS="--warmup 80" \
#                         cuda/scripts/run.sh info build test verify benchcmd
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root=$PWD
OUT=${OUT:-$root/out/gpu}
mkdir -p "$OUT"
stages=${*:-info build test bench}
status=0
say() { echo "== $*" | tee -a "$OUT/summary.txt"; }

# --- toolchain -----------------------------------------------------------
if [ -f .gpu/vendor.tar.xz ] && [ ! -d .gpu/vendor ]; then tar -C .gpu -xJf .gpu/vendor.tar.xz; fi
if [ -f .gpu/golden.tar.xz ] && [ ! -d .gpu/golden ]; then mkdir -p .gpu/golden && tar -C .gpu/golden -xJf .gpu/golden.tar.xz; fi
# The GPU tests read the golden cases from ../shared; without it, from .gpu.
if [ -z "${LINGBOTMAP_SHARED:-}" ] && [ ! -d ../shared/golden ] && [ -d .gpu/golden ]; then
  mkdir -p /tmp/lbm-shared && ln -sfn "$root/.gpu/golden" /tmp/lbm-shared/golden && export LINGBOTMAP_SHARED=/tmp/lbm-shared
fi
# The compatibility header must come before the toolkit's include directory.
export CGO_CFLAGS="-I$root/cuda/compat -O2"
# shellcheck disable=SC1091
source .gpu/env.sh
tooldir=$(go env GOTOOLDIR)
[ -x "$tooldir/vet" ] || tar -C "$tooldir" -xJf .gpu/tools.tar.xz
cuda=$(readlink -f /usr/local/cuda)
# cuBLASLt: from the toolkit, else from the pip wheels beside PyTorch. The
# linker needs an unversioned libcublasLt.so, which wheels do not ship.
lt=$(ls "$cuda"/lib64/libcublasLt.so* "$cuda"/targets/*/lib/libcublasLt.so* 2>/dev/null | head -1)
[ -n "$lt" ] || lt=$(find / -xdev -name 'libcublasLt.so*' 2>/dev/null | head -1)
hdr=$(ls "$cuda"/include/cublasLt.h "$cuda"/targets/*/include/cublasLt.h 2>/dev/null | head -1)
[ -n "$hdr" ] || hdr=$(find / -xdev -name cublasLt.h 2>/dev/null | head -1)
mkdir -p /tmp/lbm-lib
[ -n "$lt" ] && ln -sf "$lt" /tmp/lbm-lib/libcublasLt.so
export CGO_CFLAGS="$CGO_CFLAGS -I$(dirname "${hdr:-/nonexistent/x}")"
export CGO_LDFLAGS="${CGO_LDFLAGS:-} -L/tmp/lbm-lib"
export LD_LIBRARY_PATH="$(dirname "${lt:-/x/y}"):${LD_LIBRARY_PATH:-}"
export LINGBOTMAP_CUDA_KERNEL_CACHE=/tmp/lbm-kernels # the setting cuda.kernel_cache
if [ -n "${ARCH:-}" ]; then
  export LINGBOTMAP_CUDA_ARCH=$ARCH # the setting cuda.arch
  say "kernels compiled for $ARCH (LINGBOTMAP_CUDA_ARCH)"
fi

stage_info() {
  { date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm --format=csv
    "$cuda"/bin/nvcc --version | tail -2; go version
    echo "cuda=$cuda cublasLt=$lt header=$hdr"; echo "CGO_CFLAGS=$CGO_CFLAGS"; echo "CGO_LDFLAGS=$CGO_LDFLAGS"
    grep -m1 -n 'define CUDA_VERSION' "$cuda"/include/cuda.h; } 2>&1 | tee "$OUT/info.txt"
}

stage_build() {
  local t0=$SECONDS
  if go build -tags cuda ./cuda/ 2>&1 | tee "$OUT/build.log" && go vet -tags cuda ./cuda/ 2>&1 | tee -a "$OUT/build.log" &&
    go vet -tags cuda,cudadev ./cuda/ 2>&1 | tee -a "$OUT/build.log"; then
    say "cuda package builds and vets ($((SECONDS - t0)) s)"
  else
    say "BUILD FAILED (see build.log)"; status=1
  fi
  if go build -tags cuda -o /tmp/lingbotmap ./cmd/lingbotmap 2>&1 | tee -a "$OUT/build.log"; then
    say "cmd/lingbotmap builds with -tags cuda"
  else
    say "cmd/lingbotmap does not build with -tags cuda"
  fi
}

stage_test() {
  go test -tags cuda,cudadev -count=1 -v -timeout "${TEST_TIMEOUT:-240s}" -run "${TEST_RUN:-.}" -skip "${TEST_SKIP:-^$}" ./cuda/ 2>&1 | tee "$OUT/test.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  grep -E '^(--- FAIL|FAIL|ok|PASS)|relative error|device error|panic' "$OUT/test.log" | head -40 | tee -a "$OUT/summary.txt"
  # If a tensor-core attention kernel is wrong, time and verify the rest with
  # the exact fp32 kernels rather than report numbers from a broken kernel.
  if grep -qE -- '--- FAIL: Test(Paged)?Attention \(' "$OUT/test.log"; then
    export LINGBOTMAP_CUDA_EXACT_ATTENTION=1
    say "attention tests failed: later stages run with LINGBOTMAP_CUDA_EXACT_ATTENTION=1"
  fi
}

stage_bench() {
  go test -tags cuda,cudadev -count=1 -run '^$' -bench "${BENCH:-.}" -benchtime 1s -timeout 180s ./cuda/ 2>&1 | tee "$OUT/bench.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  grep -E 'Benchmark|FAIL' "$OUT/bench.log" | tee -a "$OUT/summary.txt"
}

stage_verify() { # $1 = precision
  local cases=${GOLDEN:-$(ls -d .gpu/golden/*/ 2>/dev/null)} c name
  [ -n "$cases" ] || { say "no golden cases packed (cuda/scripts/pack.sh)"; status=1; return; }
  for c in $cases; do
    name=$(basename "$c")
    timeout 240 /tmp/lingbotmap verify "$c" --device cuda --precision "$1" >"$OUT/verify-$1-$name.log" 2>&1
    local rc=$?
    # The worst relative error per output, and the verdict.
    say "verify $name $1: exit $rc, $(grep -E '^(PASS|FAIL)$' "$OUT/verify-$1-$name.log" | tail -1)"
    grep -E 'FAIL|problem:|frame types' "$OUT/verify-$1-$name.log" | head -8 | tee -a "$OUT/summary.txt"
    grep -m1 -oE 'arch=[^ ]+ kernels="[^"]+"' "$OUT/verify-$1-$name.log" | sed 's/^/  /' | tee -a "$OUT/summary.txt"
    awk 'NF>=8 && $7 ~ /e-/ {if ($6+0 > w[$1]) w[$1]=$6+0} END {for (o in w) printf "  %s %.3g\n", o, w[o]}' \
      "$OUT/verify-$1-$name.log" | sort | tee -a "$OUT/summary.txt"
    [ "$rc" = 0 ] || status=1
  done
  # The worst per output over the cases; fp8's beside bf16's when both ran
  # in this call (the issue's bar is twice bf16's measured worst).
  awk 'NF>=8 && $7 ~ /e-/ {if ($6+0 > w[$1]) w[$1]=$6+0} END {for (o in w) printf "%s %.3g\n", o, w[o]}' \
    "$OUT"/verify-"$1"-*.log | sort >"$OUT/worst-$1.txt"
  if [ "$1" = fp8 ] && [ -s "$OUT/worst-bf16.txt" ]; then
    say "fp8 against bf16, worst per output over the cases"
    join "$OUT/worst-bf16.txt" "$OUT/worst-fp8.txt" | awk '{printf "  %s bf16 %s fp8 %s: %.2fx\n", $1, $2, $3, ($2 > 0 ? $3 / $2 : 0)}' |
      tee -a "$OUT/summary.txt"
  fi
}

stage_benchcmd() {
  # shellcheck disable=SC2086
  timeout "${BENCH_TIMEOUT:-200}" /tmp/lingbotmap bench --device cuda --frames "${BENCH_FRAMES:-22}" --mem-every "${MEM_EVERY:-0}" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench-cmd.log" \
    | grep -E 'phase 1|steady|cache filling|full cache|KV cache|memory|after [0-9]+ frames|rror|cuda memory at close|cuda backend ready|cuda graphs' | tee -a "$OUT/summary.txt"
}

# pipe NAME ARGS...: one bench --pipeline run, its table into the summary.
pipe() {
  local name=$1; shift
  local rec=()
  [ "${PIPE_TRACE:-0}" = 0 ] || rec=(--trace "$OUT/trace-$name.out" --cpuprofile "$OUT/cpu-$name.pprof" --trace-seconds "${PIPE_TRACE_S:-5}")
  # shellcheck disable=SC2086
  timeout "${PIPE_TIMEOUT:-200}" /tmp/lingbotmap bench --pipeline --device cuda --json "$OUT/pipe-$name.json" "${rec[@]}" "$@" ${PIPE_ARGS:-} \
    >"$OUT/pipe-$name.log" 2>"$OUT/pipe-$name.err"
  local rc=$?
  say "pipeline $name ($*): exit $rc"
  grep -vE '^ +[0-9]+ +[0-9]+ ' "$OUT/pipe-$name.log" | tee -a "$OUT/summary.txt"
  [ "$rc" = 0 ] || { tail -5 "$OUT/pipe-$name.err" | tee -a "$OUT/summary.txt"; status=1; }
}

stage_pipeline() { # the node's frame path on encoded camera frames, beside the model alone
  local f=${PIPE_FRAMES:-1000} w=${PIPE_WARMUP:-64} i=0 alt alts=()
  pipe fast-640x480-jpeg --frames "$f" --warmup "$w" --mem-every 100 --rate 0
  pipe paced30-640x480-jpeg --frames "$f" --warmup "$w" --mem-every 100 --rate 30
  # 640×468 gives the 518×378 model input bench's figures are quoted at
  [ "${PIPE_378:-1}" = 0 ] || pipe paced30-640x468-jpeg --frames "$f" --warmup "$w" --mem-every 100 --rate 30 --pipeline-size 640x468
  # other live-window settings, paced: PIPE_ALT="--window-slots 48 --overlap-size 24;..."
  IFS=';' read -ra alts <<<"${PIPE_ALT:-}"
  for alt in "${alts[@]}"; do
    i=$((i + 1))
    # shellcheck disable=SC2086
    pipe "paced30-alt$i-640x480-jpeg" --frames "$f" --warmup "$w" --mem-every 100 --rate 30 $alt
  done
  [ "${PIPE_BIG:-1}" = 0 ] || pipe fast-1280x720-png --frames $((f / 2)) --warmup "$w" --mem-every 100 --rate 0 --encoding png --pipeline-size 1280x720
  # the model alone at the model inputs 640×480 and 640×468 frames give
  local h
  for h in 392 378; do
    timeout 200 /tmp/lingbotmap bench --device cuda --width 518 --height $h --frames 164 --warmup 80 >"$OUT/bench-$h.log" 2>&1
    say "bench 518×$h, model alone (--frames 164 --warmup 80)"
    grep -E 'phase 1|steady|cache filling|memory' "$OUT/bench-$h.log" | tee -a "$OUT/summary.txt"
  done
}

stage_smallgpu() { # the memory of cuda/README.md's settings for 8 and 16 GB cards, with a full cache
  local args i=0
  for args in "--cache-headroom 2" "--cache-headroom 2 --cache-keyframes 16" "--cache-headroom 2 --cache-keyframes 32 --width 392 --height 280"; do
    i=$((i + 1))
    # shellcheck disable=SC2086
    timeout 200 /tmp/lingbotmap bench --device cuda --frames 164 --warmup 80 $args >"$OUT/smallgpu-$i.log" 2>&1
    say "small-GPU setting $i ($args): exit $?"
    grep -E 'steady|phase 1|^memory|memory at close' "$OUT/smallgpu-$i.log" | sed -E 's/^.*INFO //' | tee -a "$OUT/summary.txt"
  done
}

stage_reach() { # cuda/README.md's GPU table: bf16, fp8 and the portable path with a full cache at 518×378
  local spec name prec arch flags specs=()
  IFS=';' read -ra specs <<<"${REACH_SPECS:-bf16 bf16 auto;fp8 fp8 auto;portable bf16 sm_80;portable-fp8 fp8 sm_80}"
  for spec in "${specs[@]}"; do
    read -r name prec arch flags <<<"$spec"
    # shellcheck disable=SC2086
    LINGBOTMAP_CUDA_ARCH=$arch timeout 200 /tmp/lingbotmap bench --device cuda --precision "$prec" --frames 164 --warmup 80 \
      --mem-every 16 ${flags:-} >"$OUT/reach-$name.log" 2>&1
    say "reach $name (precision $prec, cuda.arch $arch${flags:+, $flags}): exit $?"
    grep -E 'steady|full cache|phase 1|^memory|memory at close|cuda backend ready' "$OUT/reach-$name.log" | sed -E 's/^.*INFO //' | tee -a "$OUT/summary.txt"
  done
  if [ "${REACH_LONG:-1000}" -gt 0 ]; then
    timeout 240 /tmp/lingbotmap bench --device cuda --precision fp8 --frames "${REACH_LONG:-1000}" --warmup 80 --mem-every 100 \
      >"$OUT/reach-fp8-long.log" 2>&1
    say "reach fp8 over ${REACH_LONG:-1000} frames: exit $?"
    grep -E 'steady|full cache|^memory|after [0-9]+ frames|memory at close' "$OUT/reach-fp8-long.log" | sed -E 's/^.*INFO //' | tail -8 | tee -a "$OUT/summary.txt"
  fi
}

stage_coldstart() { # a first start: the node's frame path, paced, with empty kernel caches (ours and the driver's)
  local saved=$LINGBOTMAP_CUDA_KERNEL_CACHE d=/tmp/lbm-kernels-cold
  rm -rf "$d" /tmp/lbm-nv-cold
  export LINGBOTMAP_CUDA_KERNEL_CACHE=$d CUDA_CACHE_PATH=/tmp/lbm-nv-cold
  pipe "coldstart-${COLD_PRECISION:-fp8}-640x468-jpeg" --frames "${COLD_FRAMES:-500}" --warmup 0 --rate 30 \
    --pipeline-size 640x468 --precision "${COLD_PRECISION:-fp8}"
  grep -hE 'cuda kernels ready|compiled CUDA kernels|not prepared|clipped' "$OUT"/pipe-coldstart-*.err | sed -E 's/^.*(INFO|WARN) //' | tail -4 | tee -a "$OUT/summary.txt"
  export LINGBOTMAP_CUDA_KERNEL_CACHE=$saved
  unset CUDA_CACHE_PATH
}

stage_long() { # hours of camera in miniature: the node's default live windows, as fast as they go
  pipe long --frames "${LONG_FRAMES:-10000}" --warmup 64 --mem-every 500 --rate 0
}

stage_runfolder() { # lingbotmap run on a folder of RUN_FRAMES pictures (the bundled sequence, repeated)
  local d=/tmp/runfolder-in o=/tmp/runfolder-out i=0 f n=${RUN_FRAMES:-1000}
  rm -rf "$d" "$o"; mkdir -p "$d"
  while [ $i -lt "$n" ]; do for f in test/data/courthouse/*.png test/data/courthouse/*.jpg; do
    [ -f "$f" ] && [ $i -lt "$n" ] || continue; cp "$f" "$d/$(printf %06d $i).${f##*.}"; i=$((i + 1)); done; done
  timeout "${RUN_TIMEOUT:-200}" /tmp/lingbotmap run "$d" --device cuda --model-size full --keyframe-interval 1 --no-progress --out "$o" >"$OUT/runfolder.log" 2>&1
  say "run on $n frames: exit $?"
  tail -2 "$OUT/runfolder.log" | tee -a "$OUT/summary.txt"
  python3 -c 'import json,sys;r=json.load(open(sys.argv[1]));print(json.dumps(r["timings"]))' "$o/run.json" 2>&1 | tee -a "$OUT/summary.txt"
}

stage_peak() {
  PYTHONUNBUFFERED=1 timeout 120 python3 cuda/scripts/peak.py 2>&1 | tee "$OUT/peak.log" | grep -E '^peak' | tee -a "$OUT/summary.txt"
}

stage_profile() { # device time per operation kind and idle time, from CUDA events
  # shellcheck disable=SC2086
  LINGBOTMAP_CUDA_PROFILE=1 timeout 200 /tmp/lingbotmap bench --device cuda --frames "${PROFILE_FRAMES:-20}" ${BENCH_ARGS:-} >"$OUT/profile.log" 2>&1
  grep -E 'steady|cache filling|full cache' "$OUT/profile.log" | tee -a "$OUT/summary.txt"
  grep -E 'cuda profile|cuda gemm' "$OUT/profile.log" | head -90 | sed -E 's/^.*INFO cuda profile //' | tee -a "$OUT/summary.txt"
}

stage_ktrace() { # idle device time and time per kernel, CUDA graphs on and off, from CUPTI (kerneltrace.c)
  local inc lib recs spec name args specs
  inc=$(dirname "$(ls "$cuda"/extras/CUPTI/include/cupti.h "$cuda"/include/cupti.h "$cuda"/targets/*/include/cupti.h 2>/dev/null | head -1)")
  [ -f "$inc/cupti.h" ] || inc=$(dirname "$(find / -xdev -name cupti.h 2>/dev/null | head -1)")
  lib=$(ls "$cuda"/extras/CUPTI/lib64/libcupti.so* "$cuda"/lib64/libcupti.so* "$cuda"/targets/*/lib/libcupti.so* 2>/dev/null | head -1)
  [ -n "$lib" ] || lib=$(find / -xdev -name 'libcupti.so*' 2>/dev/null | head -1)
  [ -f "$inc/cupti.h" ] && [ -n "$lib" ] || { say "ktrace: no CUPTI headers or library here"; status=1; return; }
  if ! recs=$(CUDA_INCLUDE="$cuda/include" bash cuda/scripts/kerneltrace-build.sh "$inc" "$lib" /tmp/libktrace.so 2>"$OUT/ktrace-build.log"); then
    cat "$OUT/ktrace-build.log"; say "ktrace: kerneltrace.c does not build (ktrace-build.log)"; status=1; return
  fi
  say "ktrace: CUPTI $lib, records $recs"
  IFS=';' read -ra specs <<<"${KTRACE_SPECS:-bf16-graphs --precision bf16;bf16-direct --precision bf16 --cuda-graphs=false;fp8-graphs --precision fp8;fp8-direct --precision fp8 --cuda-graphs=false}"
  for spec in "${specs[@]}"; do
    name=${spec%% *} args=${spec#* }
    # shellcheck disable=SC2086
    LD_LIBRARY_PATH="$(dirname "$lib"):$LD_LIBRARY_PATH" CUDA_INJECTION64_PATH=/tmp/libktrace.so KTRACE_OUT=/tmp/ktrace-$name.txt \
      timeout 300 /tmp/lingbotmap bench --device cuda --frames "${KTRACE_FRAMES:-164}" --warmup 80 $args >"$OUT/ktrace-$name.log" 2>&1
    say "ktrace $name ($args): exit $?, $(grep -m1 -oE 'full cache.*' "$OUT/ktrace-$name.log")"
    grep -E 'kerneltrace|rror|host events' "$OUT/ktrace-$name.log" | head -6 | tee -a "$OUT/summary.txt"
    python3 cuda/scripts/kerneltrace.py "/tmp/ktrace-$name.txt" --frames "${KTRACE_N:-60}" --gaps "${KTRACE_GAPS:-10}" --label "$name" 2>&1 | tee -a "$OUT/summary.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
    if [ "${KTRACE_KEEP:-0}" = 1 ]; then xz -T0 -3 -f "/tmp/ktrace-$name.txt" && mv "/tmp/ktrace-$name.txt.xz" "$OUT/"; else rm -f "/tmp/ktrace-$name.txt"; fi
  done
}

stage_sanitize() { # compute-sanitizer memcheck on the tests SANITIZE_RUN selects
  local cs
  cs=$(command -v compute-sanitizer || ls "$cuda"/bin/compute-sanitizer 2>/dev/null | head -1)
  [ -n "$cs" ] || { say "no compute-sanitizer on this machine"; return; }
  go test -c -tags cuda,cudadev -o /tmp/cuda.test ./cuda/ || { say "test binary does not build"; status=1; return; }
  (cd cuda && timeout 300 "$cs" --tool memcheck --show-backtrace device /tmp/cuda.test -test.run "${SANITIZE_RUN:-.}" -test.v) 2>&1 | tee "$OUT/sanitize.log" \
    | grep -E '^(=+ (Invalid|Error|ERROR SUMMARY)|=+ +at |--- |ok|FAIL|PASS)' | head -30 | tee -a "$OUT/summary.txt"
}

stage_ncu() { # Nsight Compute on one launch of NCU_KERNEL inside the NCU_BENCH benchmark
  local ncu
  ncu=$(command -v ncu || ls "$cuda"/bin/ncu 2>/dev/null | head -1)
  [ -n "$ncu" ] || { say "no ncu on this machine"; return; }
  go test -c -tags cuda,cudadev -o /tmp/cuda.test ./cuda/ || { say "test binary does not build"; status=1; return; }
  local page=()
  [ -n "${NCU_RAW:-}" ] && page=(--page raw)
  (cd cuda && timeout "${NCU_TIMEOUT:-300}" "$ncu" --kernel-name "${NCU_KERNEL:-attn_fa2_paged_bf}" --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy --section WarpStateStats \
    --section InstructionStats --section SchedulerStats --section LaunchStats "${page[@]}" \
    /tmp/cuda.test -test.run '^$' -test.bench "${NCU_BENCH:-PagedAttention/fa2}" -test.benchtime 3x) >"$OUT/ncu.txt" 2>&1
  if [ -n "${NCU_RAW:-}" ]; then # the pipes' utilization and the stall reasons, one metric a line
    grep -E 'gpu__time_duration.sum|sm__inst_executed_pipe_[a-z0-9_]*.avg.pct_of_peak_sustained_active|sm__pipe_[a-z0-9_]*cycles_active.avg.pct_of_peak_sustained_active|issue_stalled_[a-z_]*_per_(issue|warp)_active.(ratio|pct)|sm__warps_eligible.avg.per_cycle_active|issue_active.avg.pct|ERR|rror' \
      "$OUT/ncu.txt" | awk '{print $1, $(NF-1), $NF}' | head -80 | tee -a "$OUT/summary.txt"
  else
    grep -E 'Throughput|Pipe|Issue|Stall|Warp Cycles|Occupancy|Registers|Executed Ipc|Eligible|ERR|rror' "$OUT/ncu.txt" | head -60 | tee -a "$OUT/summary.txt"
  fi
}

stage_wgcheck() { # the Hopper paged kernel alone, built by nvcc: layout probes, CPU check, time
  # WGCHECK_VARIANTS="-DA=1 -DB;-DC" also builds and times those variants.
  local t0=$SECONDS v i=0
  local IFS=';'
  for v in "" ${WGCHECK_VARIANTS:-}; do
    i=$((i + 1))
    say "wgcheck variant '${v}'"
    # shellcheck disable=SC2086
    if (IFS=' '; "$cuda"/bin/nvcc -std=c++17 -O2 -arch=sm_90a -Xptxas -v $v -o /tmp/wgcheck$i cuda/dev/wgcheck.cu -lcuda) >"$OUT/wgcheck-build$i.log" 2>&1; then
      grep -E -A2 'attn_(wg|tma|tma3)_paged_bf|attn_f8_paged' "$OUT/wgcheck-build$i.log" | grep -E 'registers|spill|C75' | tee -a "$OUT/summary.txt"
      timeout 120 /tmp/wgcheck$i 2>&1 | tee "$OUT/wgcheck$i.log" | grep -v '^probe' | tee -a "$OUT/summary.txt"
      [ "${PIPESTATUS[0]}" = 0 ] || status=1
    else
      tail -30 "$OUT/wgcheck-build$i.log" | tee -a "$OUT/summary.txt"; say "wgcheck does not build"; status=1
    fi
  done
  if [ -n "${WGCHECK_NCU:-}" ]; then # Nsight Compute on the full-size launch of the default build
    local ncu
    ncu=$(command -v ncu || ls "$cuda"/bin/ncu 2>/dev/null | head -1)
    timeout 200 "$ncu" --kernel-name "${WGCHECK_NCU_KERNEL:-attn_tma3_paged_bf}" --launch-skip 6 --launch-count 1 \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy --section WarpStateStats \
      --section InstructionStats --section SchedulerStats --page raw "/tmp/wgcheck${WGCHECK_NCU_BUILD:-1}" >"$OUT/wgncu.txt" 2>&1
    grep -E 'issue_stalled_[a-z_]*_per_issue_active.ratio|gpu__time_duration.sum|sm__inst_executed_pipe_[a-z_]*.avg.pct_of_peak_sustained_active|sm__pipe_[a-z_]*cycles_active.avg.pct|issue_active.avg.pct|rror' "$OUT/wgncu.txt" \
      | awk '$NF+0 > 0.05 || /rror|duration/' | head -70 | tee -a "$OUT/summary.txt"
  fi
  say "wgcheck took $((SECONDS - t0)) s"
}

stage_golden_sized() { # cases of the tiny model at a size whose pages reach a TMA tile
  local hw=${SIZED_HW:-224x294} dir=/tmp/golden-sized c t0=$SECONDS
  rm -rf "$dir"; mkdir -p "$dir"
  mk() { # name HxW make_golden arguments...
    local name=$1 h=${2%x*} w=${2#*x}; shift 2
    PYTHONUNBUFFERED=1 timeout 300 python3 cuda/scripts/golden_sized.py --tool .ref/make_golden.py --height "$h" --width "$w" \
      -- --ref .ref/lingbot-map --out "$dir/$name" --config tiny "$@" >"$OUT/golden-sized-$name.log" 2>&1 \
      || { tail -5 "$OUT/golden-sized-$name.log" | tee -a "$OUT/summary.txt"; say "golden-sized: $name not made"; status=1; return 1; }
  }
  mk stream_kf1 "$hw" && mk stream_kf2 "$hw" --keyframe-interval 2 && mk windowed_kf2 "$hw" --mode windowed --keyframe-interval 2 || return
  # The model is the shipped tiny one: all cases must hold the same weights.
  cp "$dir/stream_kf1/weights.safetensors" "$dir/weights.safetensors"
  for c in stream_kf2 windowed_kf2; do cmp -s "$dir/weights.safetensors" "$dir/$c/weights.safetensors" || { say "golden-sized: $c has other weights"; status=1; }; done
  if cmp -s "$dir/weights.safetensors" .gpu/golden/weights.safetensors; then say "golden-sized: weights equal the shipped tiny weights"; else say "golden-sized: weights differ from the shipped tiny weights"; fi
  say "golden-sized: $hw cases made in $((SECONDS - t0)) s"
  # bf16 runs a TMA paged kernel on these pages: the default (three
  # warpgroups), then the two-warpgroup one.
  local cases="$dir/stream_kf1 $dir/stream_kf2 $dir/windowed_kf2"
  GOLDEN=$cases stage_verify bf16
  say "golden-sized: bf16 again with LINGBOTMAP_CUDA_PAGED_KERNEL=fa2 (the portable kernel)"
  GOLDEN=$cases LINGBOTMAP_CUDA_PAGED_KERNEL=fa2 stage_verify bf16
  GOLDEN=$cases stage_verify fp32
}

stage_ref() {
  PYTHONUNBUFFERED=1 timeout 300 python3 .ref/make_golden.py --ref .ref/lingbot-map --out "$OUT/full" --config full --frames "${REF_FRAMES:-30}" 2>&1 \
    | tee "$OUT/ref.log" | tail -12 | tee -a "$OUT/summary.txt"
  # The frames that ran with a full cache, counted as bench counts them:
  # from the streaming frame after the one that filled the window.
  python3 - "$OUT/full/full_timing.json" <<'EOF' 2>&1 | tee -a "$OUT/summary.txt"
import json, statistics, sys
r = json.load(open(sys.argv[1]))
ms, w = r["per_frame_ms"], r["sliding_window"]
full = sorted(ms[w:])
if full:
    print(f"ref steady state, full cache: median {statistics.median(full):.1f} ms/frame, "
          f"p90 {full[min(len(full) - 1, len(full) * 9 // 10)]:.1f} ms/frame ({len(full)} frames)")
else:
    print(f"ref: no frame ran with a full cache ({len(ms)} streaming frames, window {w})")
blocks = [f"{i}-{min(i + 16, len(ms)) - 1}: {statistics.median(ms[i:i + 16]):.1f}" for i in range(0, len(ms), 16)]
print("ref medians by streaming frame: " + ", ".join(blocks))
EOF
}

for st in $stages; do
  say "$st ($(date -u +%T))"
  case $st in
    info) stage_info ;;
    build) stage_build ;;
    test) stage_test ;;
    bench) stage_bench ;;
    verify) stage_verify bf16; stage_verify fp32 ;;
    verify-bf16) stage_verify bf16 ;;
    verify-fp32) stage_verify fp32 ;;
    verify-fp8) stage_verify fp8 ;;
    reach) stage_reach ;;
    benchcmd) stage_benchcmd ;;
    pipeline) stage_pipeline ;;
    long) stage_long ;;
    coldstart) stage_coldstart ;;
    smallgpu) stage_smallgpu ;;
    runfolder) stage_runfolder ;;
    ref) stage_ref ;;
    golden-sized) stage_golden_sized ;;
    peak) stage_peak ;;
    profile) stage_profile ;;
    ktrace) stage_ktrace ;;
    sanitize) stage_sanitize ;;
    ncu) stage_ncu ;;
    wgcheck) stage_wgcheck ;;
    *) say "unknown stage $st"; status=2 ;;
  esac
done

say "done, status $status"
cat "$OUT/summary.txt"
exit $status
