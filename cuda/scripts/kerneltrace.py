#!/usr/bin/env python3
"""Idle device time and time per kernel over a run's last full frames, from
kerneltrace.c's record (run.sh's 'ktrace' stage).

A frame is found by its paged-attention launches (kernels named
attn_*paged*: the global layers', and the dense attention that runs on the
same kernels; a multiple of --layers), a layer or less apart; the next
frame's first one comes after the camera head, the depth head and the next
frame's encoder. The span from the first paged launch of frame i to that of
frame i+N holds N whole frames, whatever the backend does between them; the
N are the latest run of frames with the usual count among the last
--within. Busy time is the
union of every kernel, copy and memset interval inside the span (kernels
launched early by programmatic dependent launch count from their start);
idle time is the rest.
"""
import argparse
import bisect
import heapq
import re
import sys
from collections import defaultdict

PAGED = re.compile(r"^attn_\w*paged")


def family(name):
    low = name.lower()
    if ("gemm" in low or "xmma" in low or "cutlass" in low or low.startswith("nvjet")
            or low.startswith("sm90_") or low.startswith("sm80_")):
        return "cuBLASLt GEMM"
    # the camera head's own bf16 GEMVs (kernels/gemv.cu) keep their names
    if "gemv" in low and not low.startswith(("gemv_bf16", "gemv_norm_bf16")):
        return "cuBLASLt GEMV"
    return name.split("(")[0][:48]


def union_length(activities, t0, t1):
    """Length of the union of the activities' [s, e) intervals (sorted by
    start) clipped to [t0, t1), and the gaps in it."""
    total, cur_s, cur_e, gaps = 0, None, None, []
    last_end = t0
    for s, e, _ in activities:
        s, e = max(s, t0), min(e, t1)
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            if s > last_end:
                gaps.append(s - last_end)
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
        last_end = max(last_end, cur_e)
    if cur_e is not None:
        total += cur_e - cur_s
        if t1 > cur_e:
            gaps.append(t1 - cur_e)
    return total, gaps


def idle_spans(activities, t0, t1):
    """Every gap between the sorted activities inside [t0, t1), as (end of
    the last activity, start of the next, the family that ends before it,
    the one that starts after), the caller clips a gap to t0."""
    last_end, last_name = None, None
    for s, e, name in activities:
        if s >= t1:
            break
        if e <= t0:
            continue
        if last_end is not None and s > last_end and s > t0:
            yield last_end, s, last_name, family(name)
        if last_end is None or e > last_end:
            last_end, last_name = e, family(name)


def host_gaps(activities, t0, t1, least):
    """The gaps of at least `least` ns inside [t0, t1), by what ends before
    them and what starts after: {(before, after): [ns, count]}. These are
    the host's turns (a wait, a copy out and what the host does with it)."""
    per = defaultdict(lambda: [0, 0])
    for last_end, s, before, after in idle_spans(activities, t0, t1):
        if s - last_end >= least:
            d = per[(before, after)]
            d[0] += s - max(last_end, t0)
            d[1] += 1
    return per


def largest_gaps(activities, t0, t1, k):
    """The k longest gaps inside [t0, t1) as (ns, start, before, after),
    longest first: a rare host stall (a Go GC cycle, a graph being
    recorded) shows here as a few long gaps where the per-kind sums only
    show a small average."""
    found = []
    for last_end, s, before, after in idle_spans(activities, t0, t1):
        start = max(last_end, t0)
        heapq.heappush(found, (s - start, start, before, after))
        if len(found) > k:
            heapq.heappop(found)
    return sorted(found, reverse=True)


def leading_time(activities, t0, t1):
    """Device time per kernel family inside [t0, t1), each instant given to the
    earliest-started activity still running: a kernel launched early by
    programmatic dependent launch waits for its predecessor, whose time that
    is. activities are (start, end, name), sorted by start. Returns
    {family: [ns, launches started in the span]}."""
    per = defaultdict(lambda: [0, 0])
    active, now = [], t0

    def advance(until):
        nonlocal now
        while now < until:
            while active and active[0][1] <= now:
                heapq.heappop(active)
            if not active:
                now = until
                break
            s, e, name = active[0]
            end = min(e, until)
            per[family(name)][0] += end - now
            now = end

    for s, e, name in activities:
        if s >= t1:
            break
        if s > now:
            advance(s)
        if e > t0:
            heapq.heappush(active, (s, e, name))
            if s >= t0:
                per[family(name)][1] += 1
    advance(t1)
    return per


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--frames", type=int, default=60, help="consecutive whole frames to count")
    ap.add_argument("--within", type=int, default=96,
                    help="the frames counted are among this many last whole frames (those with a full cache)")
    ap.add_argument("--layers", type=int, default=24, help="global layers a frame (each launches paged attention)")
    ap.add_argument("--top", type=int, default=16)
    ap.add_argument("--label", default="")
    ap.add_argument("--gaps", type=int, default=0,
                    help="also list the gaps of 20 µs or more by what ends before them and what starts after (this many kinds), "
                         "and this many of the longest gaps with their frames")
    a = ap.parse_args()

    acts, paged, dropped, untimed = [], [], 0, 0
    with open(a.trace) as f:
        for line in f:
            parts = line.split(" ", 3)
            if parts[0] == "D":
                dropped += int(parts[1])
                continue
            if len(parts) < 4 or parts[0] not in "KCS":
                continue
            s, e = int(parts[1]), int(parts[2])
            if s == 0 or e < s:
                untimed += 1
                continue
            if parts[0] == "K":
                name = parts[3].strip()
                acts.append((s, e, name))
                if PAGED.match(name):
                    paged.append(s)
            else:
                kind = "copy" if parts[0] == "C" else "memset"
                acts.append((s, e, f"{kind} {int(parts[3]) // 1024} KiB" if a.gaps else kind))
    if dropped or untimed:
        # Untimed records are those of activities still running when their
        # buffer was flushed by force.
        print(f"{a.label}: CUPTI dropped {dropped} records and gave {untimed} no timestamps; "
              "the figures would be wrong", file=sys.stderr)
        return 1
    paged.sort()
    if len(paged) < a.layers * (a.frames + 2):
        print(f"{a.label}: {len(paged)} paged-attention launches, too few for {a.frames} frames", file=sys.stderr)
        return 1
    # Within a frame the launches come a layer apart (some layers launch
    # more than one paged kernel); the gap between frames is several layers
    # long.
    steps = sorted(paged[i + 1] - paged[i] for i in range(len(paged) - 1))
    layer_step = steps[int(0.9 * (len(steps) - 1))]
    groups, cur = [], [paged[0]]
    for t in paged[1:]:
        if t - cur[-1] > 2.5 * layer_step:
            groups.append(cur)
            cur = []
        cur.append(t)
    groups.append(cur)
    # The frames counted are the last ones, with a full cache: their most
    # common count is a frame's.
    sizes = [len(g) for g in groups[-(a.within + 1):]]
    per_frame = max(set(sizes), key=sizes.count)
    # A host stall inside a frame splits it in two: join the parts again.
    joined = []
    for g in groups:
        if joined and len(joined[-1]) < per_frame and len(joined[-1]) + len(g) <= per_frame:
            joined[-1] = joined[-1] + g
        else:
            joined.append(g)
    # Frames are counted from the start of one whole group to the start of
    # the group `frames` later, which must be whole too: a frame with another
    # count lacks records (or has some of another), and its first launch may
    # not be its start. The last group may be cut short by the end of the
    # record and is not used. The span is the latest run of regular frames
    # among the last `within`.
    groups = joined[-(a.within + 1):]
    sizes = [len(g) for g in groups]
    end = len(groups) - 2
    while end >= a.frames and any(n != per_frame for n in sizes[end - a.frames:end + 1]):
        end -= 1
    if end < a.frames or per_frame % a.layers:
        print(f"{a.label}: no {a.frames} consecutive frames of the last {a.within} have the same paged launches, "
              f"a multiple of {a.layers} (group sizes {sizes})", file=sys.stderr)
        return 1
    irregular = [n for n in sizes[:-1] if n != per_frame]
    if irregular:
        print(f"  {len(irregular)} frames of the last {a.within} left out for their paged launches "
              f"({irregular}, a frame has {per_frame})")
    t0, t1 = groups[end - a.frames][0], groups[end][0]
    n = a.frames
    acts.sort()
    busy, gaps = union_length(acts, t0, t1)
    span = t1 - t0
    per = leading_time(acts, t0, t1)
    big = sorted(gaps, reverse=True)[:n]
    print(f"{a.label}: {n} whole frames of {per_frame} paged launches, {span / n / 1e6:.2f} ms a frame (traced)")
    print(f"  device busy {busy / n / 1e6:.2f} ms a frame, idle {(span - busy) / n / 1e6:.2f} ms "
          f"({100 * (span - busy) / span:.1f} %) in {len(gaps) / n:.0f} gaps a frame; "
          f"the largest gap a frame averages {sum(big) / n / 1e6:.3f} ms")
    small = [g for g in gaps if g < 20_000]
    print(f"  gaps under 20 µs: {len(small) / n:.0f} a frame, {sum(small) / n / 1e6:.2f} ms a frame")
    print(f"  {'kernel (time while it leads)':48s} {'ms a frame':>10s} {'calls':>6s}")
    for name, (d, c) in sorted(per.items(), key=lambda kv: -kv[1][0])[: a.top]:
        print(f"  {name:48s} {d / n / 1e6:10.3f} {c / n:6.1f}")
    if a.gaps:
        hg = host_gaps(acts, t0, t1, 20_000)
        print(f"  gaps of 20 µs or more (the host's turns): {sum(d for d, _ in hg.values()) / n / 1e6:.3f} ms a frame")
        print(f"  {'ends before the gap':34s} {'starts after it':34s} {'ms a frame':>10s} {'a frame':>7s}")
        for (before, after), (d, c) in sorted(hg.items(), key=lambda kv: -kv[1][0])[: a.gaps]:
            print(f"  {before[:34]:34s} {after[:34]:34s} {d / n / 1e6:10.3f} {c / n:7.2f}")
        # Frame i (from 1) spans from its first paged launch to the next
        # frame's.
        starts = [groups[i][0] for i in range(end - n, end + 1)]
        print(f"  the longest gaps: {'ms':>7s} {'frame':>7s}  ends before it → starts after it")
        for d, s, before, after in largest_gaps(acts, t0, t1, a.gaps):
            frame = bisect.bisect_right(starts, s)
            print(f"  {'':17s}{d / 1e6:7.3f} {frame:3d}/{n:<3d}  {before} → {after}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
