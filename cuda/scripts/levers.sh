#!/usr/bin/env bash
# Issue #36's lever measurement in one GPU call (cuda/README.md, "The levers
# measured"), from the repository root after cuda/scripts/pack.sh:
#   timeout -k 5 565 cuda/scripts/levers.sh     (logs and summary.txt in $OUT, default out/gpu-levers)
# Builds; checks each lever in fp8 on one golden case (in parallel; a run
# that has not finished after 60 s, a hung kernel, is left behind and its
# lever dropped); times each lever alone on top of BASE with a full cache;
# then the levers that were faster alone, together: bench fp8 and bf16,
# verify on every golden case, a CUPTI trace; last the portable sm_80
# path's verify and bench. BASE sets the defaults the levers were measured
# against (before fc1_bf16, qkv_bf16, camera_head_bf16 and layernorm_v4
# were on by default).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
T0=$SECONDS; O=${OUT:-out/gpu-levers}; mkdir -p "$O"; O=$(cd "$O" && pwd); export OUT=$O
BASE=${BASE-LINGBOTMAP_CUDA_LAYERNORM_V4=false LINGBOTMAP_CUDA_FC1_BF16=false LINGBOTMAP_CUDA_CAMERA_HEAD_BF16=false LINGBOTMAP_CUDA_QKV_BF16=false}
log() { echo "$*" | tee -a $O/summary.txt; }
el() { echo $((SECONDS - T0)); }
waitdl() { local pid=$1 dl=$2; while kill -0 $pid 2>/dev/null; do [ $SECONDS -ge $dl ] && return 1; sleep 1; done; return 0; }
worst() { awk 'NF>=8 && $7 ~ /e-/ {if ($6+0 > w[$1]) w[$1]=$6+0} END {for (o in w) printf "%s=%.3g ", o, w[o]}' "$@"; }
bash cuda/scripts/run.sh info build >$O/build.console 2>&1; grep '^==' $O/build.console | grep -v 'done,' | tee -a $O/summary.txt
L=/tmp/lingbotmap
declare -A LEV=([poly1]="LINGBOTMAP_CUDA_ATTN_EXP_POLY=1" [poly2]="LINGBOTMAP_CUDA_ATTN_EXP_POLY=2" [lazy]="LINGBOTMAP_CUDA_ATTN_LAZY_RESCALE=true" [fold]="LINGBOTMAP_CUDA_ATTN_FOLD_COMBINE=true" [head]="LINGBOTMAP_CUDA_CAMERA_HEAD_BF16=true" [qkv]="LINGBOTMAP_CUDA_QKV_BF16=true LINGBOTMAP_CUDA_FC1_BF16=true" [overlap]="LINGBOTMAP_OVERLAP_FRAMES=true LINGBOTMAP_CUDA_ASYNC_PAGE_TABLE=true" [lnv4]="LINGBOTMAP_CUDA_LAYERNORM_V4=true" [elemoff]="LINGBOTMAP_CUDA_FUSE_NORM=false LINGBOTMAP_CUDA_LEAN_QKV=false LINGBOTMAP_CUDA_WARP_COMBINE=false")
NAMES="poly1 poly2 lazy fold head qkv overlap lnv4 elemoff"
# 1. correctness of each lever in fp8 on stream_kf1
declare -A PID
for n in $NAMES; do (env $BASE ${LEV[$n]} $L verify .gpu/golden/stream_kf1 --device cuda --precision fp8 >$O/v1-$n.log 2>&1; echo "rc $?" >>$O/v1-$n.log) & PID[$n]=$!; done
dl=$((SECONDS + 60)); OK=""
for n in $NAMES; do
  if waitdl ${PID[$n]} $dl; then r=$(grep -E '^(PASS|FAIL)$' $O/v1-$n.log | tail -1); log "verify fp8 stream_kf1 $n: $r $(tail -1 $O/v1-$n.log) $(worst $O/v1-$n.log)"; [ "$r" = PASS ] && OK="$OK $n"
  else log "verify fp8 stream_kf1 $n: NOT DONE after 60 s (hang?), left out"; fi
done
log "levers that passed: $OK ($(el) s)"
# 2. each lever's full-cache bench alone, fp8
declare -A MS
bench() { local name=$1 prec=$2; shift 2
  [ $(el) -lt ${STOPB:-470} ] || { log "bench $name: no time left"; return; }
  env $BASE "$@" timeout -k 3 60 $L bench --device cuda --precision $prec --frames 164 --warmup 80 >$O/b-$name.log 2>&1
  local rc=$? m; m=$(grep -oE 'full cache: median [0-9.]+' $O/b-$name.log | grep -oE '[0-9.]+$'); MS[$name]=${m:-999}
  log "bench $name ($prec $*): rc $rc | $(grep -E 'steady state' $O/b-$name.log | sed -E 's/^.*full cache: //') | $(grep -oE 'phase 1[^;]*' $O/b-$name.log | head -1) | $(grep -oE 'peak="[^"]*"' $O/b-$name.log | tail -1)"; }
bench fp8-base fp8 X=1
for n in $OK; do bench fp8-$n fp8 ${LEV[$n]}; done
bench fp8-base2 fp8 X=1
base=$(python3 -c "print(min(${MS[fp8-base]}, ${MS[fp8-base2]}))")
COMBO=""; for n in $OK; do case $n in elemoff|poly2) continue;; esac
  [ "$(python3 -c "print(int(${MS[fp8-$n]} < $base - 0.15))")" = 1 ] && COMBO="$COMBO ${LEV[$n]}"; done
[ "$(python3 -c "print(int(${MS[fp8-poly2]:-999} < min(${MS[fp8-poly1]:-999}, $base) - 0.15))")" = 1 ] && COMBO=$(echo "$COMBO" | sed 's/ATTN_EXP_POLY=1/ATTN_EXP_POLY=2/')
log "faster alone than base ($base ms): $COMBO ($(el) s)"
[ -n "$COMBO" ] && bench fp8-combo fp8 $COMBO
bench bf16-base bf16 X=1
[ -n "$COMBO" ] && bench bf16-combo bf16 $COMBO
bench bf16-elemoff bf16 ${LEV[elemoff]}
# 3. the combination on every case, bf16 and fp8, in parallel
for p in bf16 fp8; do for c in .gpu/golden/*/; do (env $BASE $COMBO X=1 $L verify $c --device cuda --precision $p >$O/vc-$p-$(basename $c).log 2>&1; echo "rc $?" >>$O/vc-$p-$(basename $c).log) & done; done
sleep 25; for f in $O/vc-*.log; do log "verify combo $(basename $f .log): $(grep -E '^(PASS|FAIL)$' $f | tail -1) $(tail -1 $f | grep rc) $(worst $f)"; done
# 4. CUPTI trace of the combination, fp8
[ $(el) -lt 430 ] && KTRACE_SPECS="fp8-combo --precision fp8" OUT=$O/kt env $BASE $COMBO X=1 timeout -k 3 90 bash cuda/scripts/run.sh ktrace >$O/kt.console 2>&1
grep -vE '^== (done|ktrace \()' $O/kt/summary.txt 2>/dev/null | head -45 | tee -a $O/summary.txt
# 5. the portable path (sm_80) with the defaults
for c in .gpu/golden/*/; do (env $BASE LINGBOTMAP_CUDA_ARCH=sm_80 $L verify $c --device cuda --precision bf16 >$O/v80-$(basename $c).log 2>&1; echo "rc $?" >>$O/v80-$(basename $c).log) & done
sleep 22; for f in $O/v80-*.log; do log "verify sm_80 bf16 $(basename $f .log): $(grep -E '^(PASS|FAIL)$' $f | tail -1) $(tail -1 $f | grep rc) $(worst $f)"; done
STOPB=540 bench sm80-bf16 bf16 LINGBOTMAP_CUDA_ARCH=sm_80
log "== end at $(el) s"
