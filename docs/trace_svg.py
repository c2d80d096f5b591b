#!/usr/bin/env python3
"""docs/trace_svg.py TRACE.json OUT.svg [STEP]: draws one training step of
a pipeline from a real `tfg run --trace` (docs/big-models.md): per stage
device a row, each micro-batch's forward and backward on that device as one
box from its first launch to its last (forwards blue, backwards orange,
the micro-batch's number inside), so the schedule's staircase and its
bubble show as they ran. STEP (default 2: the first is a warm-up) counts
steps by their optimizer updates."""
import json
import sys


def main():
    trace, out = sys.argv[1], sys.argv[2]
    want = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    events = [e for e in json.load(open(trace))["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "op"]
    names = {}
    for e in json.load(open(trace))["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            names[e["pid"]] = e["args"]["name"]
    events.sort(key=lambda e: e["ts"])
    # the launches of step `want` on each device: after its (want - 1)-th
    # run of updates (the devices end a step at different times)
    picked = []
    for pid in sorted({e["pid"] for e in events}):
        step, in_updates = 1, False
        for e in (e for e in events if e["pid"] == pid):
            if e["name"].endswith("_update"):
                in_updates = True
                continue
            if in_updates:
                step, in_updates = step + 1, False
            if step == want and e["name"].startswith(("fwd ", "bwd ")):
                picked.append(e)
    if not picked:
        sys.exit("trace_svg.py: no labelled launch in step %d" % want)
    boxes = {}  # (pid, unit) -> [t0, t1]
    for e in picked:
        unit = " ".join(e["name"].split()[:3])
        b = boxes.setdefault((e["pid"], unit), [e["ts"], e["ts"] + e["dur"]])
        b[0], b[1] = min(b[0], e["ts"]), max(b[1], e["ts"] + e["dur"])
    t0 = min(b[0] for b in boxes.values())
    t1 = max(b[1] for b in boxes.values())
    pids = sorted({p for p, _ in boxes})
    W, left, row, top = 880, 70, 40, 30
    scale = (W - left - 10) / (t1 - t0)
    svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">'
           % (W, top + row * len(pids) + 30),
           '<text x="%d" y="18">one training step of %s, %.1f ms (tfg run --trace)</text>'
           % (left, trace.split("/")[-1], (t1 - t0) / 1e3)]
    for i, pid in enumerate(pids):
        y = top + i * row
        svg.append('<text x="4" y="%d">%s</text>' % (y + row // 2 + 4, names.get(pid, "device %d" % pid)))
        for (p, unit), (a, b) in sorted(boxes.items()):
            if p != pid:
                continue
            kind, _, m = unit.split()
            x, w = left + (a - t0) * scale, max((b - a) * scale, 1)
            svg.append('<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s" stroke="white"/>'
                       % (x, y + 4, w, row - 10, "#4c78a8" if kind == "fwd" else "#f58518"))
            if w > 12:
                svg.append('<text x="%.1f" y="%d" fill="white" text-anchor="middle">%s</text>'
                           % (x + w / 2, y + row // 2 + 4, m[1:]))
    y = top + row * len(pids) + 18
    svg.append('<rect x="%d" y="%d" width="12" height="12" fill="#4c78a8"/><text x="%d" y="%d">forward of micro-batch N</text>'
               % (left, y - 10, left + 16, y))
    svg.append('<rect x="%d" y="%d" width="12" height="12" fill="#f58518"/><text x="%d" y="%d">backward</text>'
               % (left + 190, y - 10, left + 206, y))
    svg.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
