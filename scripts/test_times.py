#!/usr/bin/env python3
"""Per-test CPU time of the ctest suite: where `make test`'s time goes.

Runs every test ctest lists (or those matching -R) with its own command,
environment and working directory, -j at a time, and reports each one's
wall time and CPU time (user + system, the test's whole process tree as
wait4 counts it). On a machine shared with other work the wall times
follow the load; the CPU times barely do, so compare those.

  python3 scripts/test_times.py build [-j 2] [-R regex] [-o times.tsv]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time


def tests_of(build, regex):
    out = subprocess.run(["ctest", "--show-only=json-v1"], cwd=build, check=True,
                         capture_output=True, text=True).stdout
    found = []
    for t in json.loads(out)["tests"]:
        if regex and not re.search(regex, t["name"]):
            continue
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        env = dict(os.environ, OMP_WAIT_POLICY="passive")  # as `make test`
        for kv in props.get("ENVIRONMENT", []):
            k, _, v = kv.partition("=")
            env[k] = v
        found.append({"name": t["name"], "command": t["command"], "env": env,
                      "cwd": props.get("WORKING_DIRECTORY", build),
                      "skip_rc": props.get("SKIP_RETURN_CODE"),
                      "cleanup": "FIXTURES_CLEANUP" in props})
    # a fixture's cleanup (test_tmp_left) after the tests, as ctest runs it
    return [t for t in found if not t["cleanup"]] + [t for t in found if t["cleanup"]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("-j", type=int, default=2)
    ap.add_argument("-R", dest="regex")
    ap.add_argument("-o", dest="out", help="also write name, wall, cpu, status as TSV")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    todo = tests_of(build, args.regex)
    running, done = {}, []
    t_start = time.monotonic()
    while todo or running:
        while todo and len(running) < args.j:
            t = todo.pop(0)
            p = subprocess.Popen(t["command"], cwd=t["cwd"], env=t["env"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            running[p.pid] = (t, time.monotonic())
        pid, status, ru = os.wait4(-1, 0)
        if pid not in running:
            continue
        t, t0 = running.pop(pid)
        rc = os.waitstatus_to_exitcode(status)
        state = "ok" if rc == 0 else "skip" if t["skip_rc"] is not None and rc == int(t["skip_rc"]) \
            else "FAIL(%d)" % rc
        done.append((t["name"], time.monotonic() - t0, ru.ru_utime + ru.ru_stime, state))
        print("%-36s %8.1f s wall %8.1f s cpu  %s" % done[-1], flush=True)
    done.sort(key=lambda d: -d[2])
    wall = time.monotonic() - t_start
    cpu = sum(d[2] for d in done)
    print("\n%d tests, %.0f s wall at -j %d, %.0f s cpu in all; load %s" %
          (len(done), wall, args.j, cpu, os.getloadavg()))
    for d in done[:25]:
        print("%-36s %8.1f s wall %8.1f s cpu  %s" % d)
    if args.out:
        with open(args.out, "w") as f:
            for d in done:
                f.write("%s\t%.2f\t%.2f\t%s\n" % d)
    return 1 if any(d[3].startswith("FAIL") for d in done) else 0


if __name__ == "__main__":
    sys.exit(main())
