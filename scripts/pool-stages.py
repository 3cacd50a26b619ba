#!/usr/bin/env python3
"""Where a desktop hand-over's time goes, from the services' logs of an `e2e-bench --pool` run:
`pool-stages.py LOGFILE` (docs/benchmark.md, "500 dial-out desktops").

The run must log the agent's runner, dial-out and processor events and the session store's at debug:

    UFO_LOG=info,ufo_agent::runner=debug,ufo_agent::dispatch::dialout=debug,ufo_agent::processor=debug,ufo_session::store=debug \\
      target/debug/e2e-bench --pool --store embedded --pool-logs LOGFILE

For every hand-over (a desktop reset at a task's end, then `CheckInAndClaim` claiming the next task) it
follows the next task from the agent's log lines, all on the agent's clock, and prints p50 / p90 of each
stage as a Markdown table; then the session service's side of `CheckInAndClaim` (its wait for a write
transaction and the transaction itself).
"""
import re
import sys
from datetime import datetime

STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6})Z")
TASK = re.compile(r"task\{task_id=([0-9a-f-]+)")


def millis(line: str):
    m = STAMP.match(line)
    return m and datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f").timestamp() * 1000


def field(line: str, name: str) -> str | None:
    m = re.search(name + r"=(\S+)", line)
    return m.group(1) if m else None


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


STAGES = [
    ("reset answered → `CheckInAndClaim` answered (agent)", "freed", "answer"),
    ("answer → `task started`", "answer", "started"),
    ("`task started` → agents built", "started", "built"),
    ("agents built → HostAgent's processing started", "built", "processing"),
    ("processing started → `ListTools` sent", "processing", "list_tools"),
    ("`ListTools` sent → first `Execute` sent", "list_tools", "execute"),
    ("**reset answered → first `Execute` sent**", "freed", "execute"),
]


def main() -> int:
    reset_at = {}
    handed = {}
    store_ms = []
    writer_wait, transaction = [], []
    for line in open(sys.argv[1], encoding="utf-8", errors="replace"):
        t = millis(line)
        if t is None:
            continue
        if "ufo_agent::runner::desktop: desktop reset desktop=" in line:
            reset_at[field(line, "desktop reset desktop")] = t
        elif "desktop checked in and handed over" in line:
            desktop = field(line, "desktop")
            task = field(line, "next_task")
            store_ms.append(float(field(line, "store_ms")))
            if desktop in reset_at:
                handed[task] = {"freed": reset_at[desktop], "answer": t}
        elif "hand-over transaction done" in line:
            # Postgres's hand-over is one statement (`ufo_claim`): no separate wait for a transaction.
            waited = field(line, "writer_wait_ms")
            wait, total = float(waited) if waited else 0.0, float(field(line, "total_ms"))
            writer_wait.append(wait)
            transaction.append(total - wait)
        else:
            m = TASK.search(line)
            times = m and handed.get(m.group(1))
            if not times:
                continue
            marks = [
                ("started", "task started"),
                ("built", "the task's agents built"),
                ("processing", "processing started"),
            ]
            if "tunnelled call sent" in line and 'method="ListTools"' in line:
                marks.append(("list_tools", "tunnelled call sent"))
            if "tunnelled call sent" in line and 'method="Execute"' in line:
                marks.append(("execute", "tunnelled call sent"))
            for key, text in marks:
                if text in line and key not in times:
                    times[key] = t
    complete = [t for t in handed.values() if all(k in t for _, a, b in STAGES for k in (a, b))]
    print(f"hand-overs followed: {len(complete)}\n")
    print("| stage (agent's clock) | p50 ms | p90 ms |\n| --- | --- | --- |")
    for name, start, end in STAGES:
        spans = [t[end] - t[start] for t in complete]
        if spans:
            print(f"| {name} | {percentile(spans, 50):.1f} | {percentile(spans, 90):.1f} |")
    if store_ms:
        print(f"| of which the `CheckInAndClaim` call | {percentile(store_ms, 50):.1f} | {percentile(store_ms, 90):.1f} |")
    if writer_wait:
        print(f"| session service: waiting for a write transaction | {percentile(writer_wait, 50):.1f} | {percentile(writer_wait, 90):.1f} |")
        print(f"| session service: the transaction (check-in, claim, start) and commit | {percentile(transaction, 50):.1f} | {percentile(transaction, 90):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
