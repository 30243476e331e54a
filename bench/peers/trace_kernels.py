#!/usr/bin/env python3
"""Each step's fastest and median time in a `loom bench MODEL --trace FILE`
trace (Chrome trace JSON), in program order: the runs are the repeats of
the step sequence, so the step at position i of every run is one line.
Set beside `onnx_bench.py MODEL --profile`.

  loom bench MODEL.onnx --modes stitch --threads 1 --runs 40 --trace t.json
  python3 bench/peers/trace_kernels.py t.json
"""
import json
import sys


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    names = [e["name"] for e in events]
    # the shortest period of the step names: one run's steps
    period = next(p for p in range(1, len(names) + 1)
                  if len(names) % p == 0 and all(names[i] == names[i % p] for i in range(len(names))))
    runs = len(names) // period
    total = 0.0
    for i in range(period):
        d = sorted(events[r * period + i]["dur"] for r in range(runs))
        total += d[0]
        print(f"{i:3d} {names[i][:40]:40} min {d[0]:9.1f} us  median {d[len(d) // 2]:9.1f} us")
    print(f"{runs} runs of {period} steps; sum of the minimums: {total:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
