#!/usr/bin/env python3
"""An independent live walk of one application's accessible tree, with Debian's python3-pyatspi.

Used by tests/observe.rs to check the executor's control list against something that shares none of
its code: no cache, one live call per property, nothing filtered but by what is on screen.

Usage: live_walk.py PID [TITLE]  (DISPLAY and DBUS_SESSION_BUS_ADDRESS name the desktop)
Prints JSON: {"window": {name, role}, "nodes": [{role, name, rect: [x, y, w, h], actions: [...]}]}
with every node that is showing, visible, has an on-screen area and can be acted on (an action, an
editable text, or a selectable/clickable role).
"""

import json
import sys

import pyatspi

ACTIONABLE_ROLES = {
    "push button", "toggle button", "check box", "radio button", "menu item", "check menu item",
    "radio menu item", "menu", "page tab", "entry", "password text", "spin button", "slider",
    "combo box", "list item", "table cell", "tree item", "link", "scroll bar", "table column header",
    "column header", "text",
}
DIALOGS = {"dialog", "file chooser", "alert", "color chooser", "font chooser"}


def states(acc):
    return acc.getState()


def front_window(app, title):
    tops = [w for w in app if w is not None and states(w).contains(pyatspi.STATE_SHOWING)]
    for pred in (
        lambda w: w.getRoleName() in DIALOGS and states(w).contains(pyatspi.STATE_ACTIVE),
        lambda w: w.getRoleName() in DIALOGS and states(w).contains(pyatspi.STATE_MODAL),
        lambda w: states(w).contains(pyatspi.STATE_ACTIVE),
        lambda w: w.name == title,
    ):
        hits = [w for w in tops if pred(w)]
        if len(hits) == 1:
            return hits[0]
    return tops[0] if len(tops) == 1 else None


def walk(acc, out, depth=0):
    if depth > 64 or len(out) > 5000:
        return
    st = states(acc)
    if depth > 0 and not st.contains(pyatspi.STATE_SHOWING):
        return
    role = acc.getRoleName()
    try:
        ext = acc.queryComponent().getExtents(pyatspi.DESKTOP_COORDS)
        rect = [ext.x, ext.y, ext.width, ext.height]
    except NotImplementedError:
        rect = [0, 0, 0, 0]
    actions = []
    try:
        a = acc.queryAction()
        actions = [a.getName(i) for i in range(a.nActions)]
    except NotImplementedError:
        pass
    editable = st.contains(pyatspi.STATE_EDITABLE)
    on_screen = st.contains(pyatspi.STATE_VISIBLE) and rect[2] > 0 and rect[3] > 0
    if depth > 0 and on_screen and (actions or editable or role in ACTIONABLE_ROLES):
        if role != "text" or editable:
            out.append({"role": role, "name": acc.name, "rect": rect, "actions": actions})
    for child in acc:
        if child is not None:
            walk(child, out, depth + 1)


def main():
    pid = int(sys.argv[1])
    title = sys.argv[2] if len(sys.argv) > 2 else ""
    desktop = pyatspi.Registry.getDesktop(0)
    app = next((a for a in desktop if a is not None and a.get_process_id() == pid), None)
    if app is None:
        print(json.dumps({"error": f"no accessible application with pid {pid}"}))
        return 1
    win = front_window(app, title)
    if win is None:
        print(json.dumps({"error": "no single front window"}))
        return 1
    nodes = []
    walk(win, nodes)
    print(json.dumps({"window": {"name": win.name, "role": win.getRoleName()}, "nodes": nodes}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
