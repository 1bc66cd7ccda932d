#!/usr/bin/env python3
"""A decode step's timeline from tools/kernel_trace.cpp's CSV (scripts/device_run.sh, stage trace).

Steps end at each run of launches of the run's last kernel (the decode step's draw on the GPU).
For the last full step: its wall time (from the end of the previous step's last kernel to the end of its
own), the time the GPU ran something, the gaps where it ran nothing, and per kernel name the
exclusive time: end - max(start, the previous record's end), so a kernel launched early by
programmatic dependent launch (whose blocks wait at griddepcontrol.wait) is charged only from
when its predecessor finished. Exclusive times and gaps add up to the wall time.

usage: trace_summary.py kernel_trace.csv [step_list.txt]"""
import collections
import csv
import sys


def short(n):
    return n.split("(")[0] if "gemm_bf16_k" in n else n.split("(")[0].split("<")[0].replace("void ", "")


rows = []
with open(sys.argv[1]) as f:
    for r in csv.DictReader(f):
        rows.append((int(r["start_ns"]), int(r["end_ns"]), r["kind"], int(r["grid"]), int(r["graph_id"]), r["name"]))
kernels = [r for r in rows if r[2] == "kernel"]
if not kernels:
    sys.exit("no kernels in the trace")
last = short(kernels[-1][5])
# A step's end: a launch of the last kernel not directly after another (a step may draw its rows
# in several launches of it).
marks = [i for i, r in enumerate(rows) if r[2] == "kernel" and short(r[5]) == last]
marks = [i for j, i in enumerate(marks) if j + 1 == len(marks) or marks[j + 1] != i + 1]
print(f"{len(rows)} records, {len(marks)} ends of a step ({last})")
if len(marks) < 2:
    sys.exit(0)
step = rows[marks[-2] + 1: marks[-1] + 1]
t0, t1 = rows[marks[-2]][1], step[-1][1]
wall = t1 - t0
by = collections.defaultdict(lambda: [0, 0, 0])  # count, exclusive ns, in graphs
gaps = []
prev_end, prev_name = t0, short(rows[marks[-2]][5])
busy = 0
listing = []
for s, e, kind, grid, graph, name in step:
    n = short(name) if kind == "kernel" else kind
    if s > prev_end:
        gaps.append((s - prev_end, prev_name, n))
    excl = max(0, e - max(s, prev_end))
    busy += excl
    by[n][0] += 1
    by[n][1] += excl
    by[n][2] += graph != 0
    listing.append(f"{excl / 1e3:9.2f} us excl {(e - s) / 1e3:9.2f} us span grid {grid:8d} graph {graph:5d}  {n[:110]}")
    if e > prev_end:
        prev_end, prev_name = e, n
idle = sum(g[0] for g in gaps)
print(f"last step: {len(step)} records, wall {wall / 1e3:.1f} us, GPU running {busy / 1e3:.1f} us, "
      f"idle {idle / 1e3:.1f} us in {len(gaps)} gaps")
for n, (c, ns, g) in sorted(by.items(), key=lambda kv: -kv[1][1]):
    print(f"{ns / 1e3:10.1f} us {c:5d} x {ns / c / 1e3:8.2f} us ({g} in graphs)  {n[:130]}")
print("largest gaps:")
for g, a, b in sorted(gaps, reverse=True)[:15]:
    print(f"{g / 1e3:9.2f} us  after {a[:60]}  before {b[:60]}")
if len(sys.argv) > 2:
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(listing) + "\n")
