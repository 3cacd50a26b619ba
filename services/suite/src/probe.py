# The suite's independent reader of accessible state: a live pyatspi walk, not the executor.
# Usage: python3 probe.py '{"app": "...", "role": "check box", "name": "..."}'
# Prints one JSON object: {"matches": [{"name", "states", "text", "value"}, ...] (shown controls of that
# role and name, in document order), "apps": [...], "same_role": [names of shown controls of that role]}
# or {"error": "..."} when the walk itself fails.
import json
import sys

try:
    import pyatspi
except ImportError as e:
    print(json.dumps({"error": "pyatspi is not installed (Debian: python3-pyatspi): %s" % e}))
    sys.exit(0)

MAX_NODES = 20000
MAX_MATCHES = 200


def states_of(node):
    try:
        return [pyatspi.stateToString(s) for s in node.getState().getStates()]
    except Exception:
        return []


def main():
    want = json.loads(sys.argv[1])
    app_name = want["app"].lower()
    role = want["role"].lower()
    name = want.get("name", "")
    desktop = pyatspi.Registry.getDesktop(0)
    apps = []
    same_role = []
    matches = []
    seen = 0
    for app in desktop:
        if app is None:
            continue
        apps.append(app.name)
        if app.name.lower() != app_name:
            continue
        stack = [app]
        while stack and seen < MAX_NODES:
            node = stack.pop()
            seen += 1
            try:
                node_role = node.getRoleName()
                node_name = node.name or ""
                children = [node.getChildAtIndex(i) for i in range(node.childCount)]
            except Exception:
                continue
            states = states_of(node)
            # Only what is shown counts (the agent, too, is shown only what is on screen).
            if node is not app and "showing" not in states:
                continue
            if node_role == role:
                same_role.append(node_name)
                if node_name == name and len(matches) < MAX_MATCHES:
                    match = {"name": node_name, "states": states, "text": None, "value": None}
                    try:
                        match["text"] = node.queryText().getText(0, -1)
                    except Exception:
                        pass
                    try:
                        match["value"] = node.queryValue().currentValue
                    except Exception:
                        pass
                    matches.append(match)
            stack.extend(reversed([c for c in children if c is not None]))
    print(json.dumps({"matches": matches, "apps": apps, "same_role": same_role[:40]}))


try:
    main()
except Exception as e:  # the walk failed: say so, do not crash without output
    print(json.dumps({"error": "%s: %s" % (type(e).__name__, e)}))
