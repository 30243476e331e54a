#!/usr/bin/env python3
"""Prints `loom bench --json` and the peers' JSON lines side by side: the
median time of every workload per mode, and each time relative to Loom's
stitch mode (time(mode) / time(stitch): above 1 means stitch is faster);
for workloads with GEMMs, each time over their floor (the GEMM FLOPs at
the sgemm rate Loom measured): the largest ratio any plan could reach.

    loom bench --size small --json > loom.jsonl
    python3 bench/peers/torch_bench.py --size small > torch.jsonl
    python3 bench/peers/compare.py loom.jsonl torch.jsonl

Standard library only."""

import json
import sys


def main(paths):
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    times, modes, order, floors = {}, [], [], {}
    for path in paths:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                o = json.loads(line)
                if "machine" in o:
                    m = o["machine"]
                    src = m.get("framework", "loom")
                    print("%-12s triad %.1f GB/s, sgemm %.1f GFLOP/s, %s threads" % (
                        src, m.get("triad_gbps", 0), m.get("sgemm_gflops", 0), m.get("threads")))
                    continue
                if "median_s" not in o:
                    continue
                w, mode = o["workload"], o["mode"]
                if w not in order:
                    order.append(w)
                if mode not in modes:
                    modes.append(mode)
                times[(w, mode)] = o["median_s"]
                if mode == "stitch" and o.get("gemm_floor_s"):
                    floors[w] = o["gemm_floor_s"]
    print()
    print("%-26s" % "median ms" + "".join("%14s" % m for m in modes))
    for w in order:
        print("%-26s" % w + "".join(
            "%14s" % ("%.3f" % (1e3 * times[(w, m)]) if (w, m) in times else "-") for m in modes))
    print()
    print("%-26s" % "time / loom stitch" + "".join("%14s" % m for m in modes))
    for w in order:
        base = times.get((w, "stitch"))
        cells = []
        for m in modes:
            t = times.get((w, m))
            cells.append("%14s" % ("%.2f" % (t / base) if t and base else "-"))
        print("%-26s" % w + "".join(cells))
    if floors:
        # The most any plan of these GEMMs could reach: their FLOPs alone at
        # the sgemm rate Loom measured, against each mode's time.
        print()
        print("%-26s" % "time / GEMM floor" + "".join("%14s" % m for m in modes))
        for w in order:
            if w not in floors:
                continue
            cells = []
            for m in modes:
                t = times.get((w, m))
                cells.append("%14s" % ("%.2f" % (t / floors[w]) if t else "-"))
            print("%-26s" % w + "".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
