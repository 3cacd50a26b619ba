#!/usr/bin/env python3
"""In-process pyatspi baseline for benches/desktop.rs: the same operations the executor benchmark times,
done the way a Python agent would with Debian's python3-pyatspi, on the same desktop and application.

Usage: pyatspi_baseline.py PID RUNS  (DISPLAY and DBUS_SESSION_BUS_ADDRESS name the desktop)
Prints JSON {"controls": [ms...], "click": [ms...], "set_text": [ms...]}: a live walk listing the shown
controls; Action.doAction on an enabled check box until its checked state is seen flipped; SetTextContents
of 20 characters on an enabled editable text until the text is read back.
"""

import json
import sys
import time

import pyatspi


def showing(acc):
    return acc.getState().contains(pyatspi.STATE_SHOWING)


def walk(acc, out):
    out.append(acc)
    for c in acc:
        if c is not None and showing(c):
            # What a listing reads per node: name, role, states, bounds.
            c.name, c.getRoleName(), c.queryComponent().getExtents(pyatspi.DESKTOP_COORDS)
            walk(c, out)


def main():
    pid, runs = int(sys.argv[1]), int(sys.argv[2])
    app = next(a for a in pyatspi.Registry.getDesktop(0) if a is not None and a.get_process_id() == pid)
    win = next(w for w in app if w is not None and showing(w))
    res = {"controls": [], "click": [], "set_text": []}
    nodes = []
    for _ in range(runs):
        t = time.perf_counter()
        nodes = []
        walk(win, nodes)
        res["controls"].append((time.perf_counter() - t) * 1e3)
    enabled = lambda n: n.getState().contains(pyatspi.STATE_ENABLED)
    box = next(n for n in nodes if n.getRoleName() == "check box" and enabled(n))
    for _ in range(runs):
        t = time.perf_counter()
        before = box.getState().contains(pyatspi.STATE_CHECKED)
        box.queryAction().doAction(0)
        while box.getState().contains(pyatspi.STATE_CHECKED) == before:
            pass
        res["click"].append((time.perf_counter() - t) * 1e3)
    edit = next(n for n in nodes if n.getState().contains(pyatspi.STATE_EDITABLE) and enabled(n)
                and n.getRoleName() in ("text", "entry"))
    for i in range(runs):
        want = "%020d" % i
        t = time.perf_counter()
        edit.queryEditableText().setTextContents(want)
        text = edit.queryText()
        while text.getText(0, -1) != want:
            pass
        res["set_text"].append((time.perf_counter() - t) * 1e3)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
