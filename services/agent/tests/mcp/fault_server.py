#!/usr/bin/env python3
"""A minimal MCP server over stdio (raw JSON-RPC, standard library only) whose tool misbehaves on purpose,
for the agent's MCP fault tests (services/agent/tests/mcp_agent.rs).

Usage: fault_server.py MODE [PIDFILE [CALLLOG]]
MODE: ok (echo answers), block (writes the call to CALLLOG, then never answers: a call in flight when
the agent is killed), linger (like ok, but keeps running after its stdin closes, as a careless
server would: only the kernel's parent-death signal or a kill ends it), crash (exits in the middle of a call), hang (never answers a call),
garbage (answers a call with bytes that are not JSON-RPC). PIDFILE, when given, receives this
process's pid once it runs (the tests check it is gone afterwards). CALLLOG, when given, gets one line
per tool call received ("NAME TEXT"), written before the call is answered.
"""
import json
import os
import sys
import time

mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
if len(sys.argv) > 2:
    with open(sys.argv[2], "w") as f:
        f.write(str(os.getpid()))


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


TOOL = {
    "name": "echo",
    "description": "Echoes its text.",
    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
}

for line in sys.stdin:
    line = line.strip()
    if not line:
        continue
    msg = json.loads(line)
    method = msg.get("method")
    mid = msg.get("id")
    if method == "initialize":
        version = msg.get("params", {}).get("protocolVersion", "2025-06-18")
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": version,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "fault", "version": "1"},
        }})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": [TOOL]}})
    elif method == "tools/call":
        if len(sys.argv) > 3:
            params = msg.get("params", {})
            with open(sys.argv[3], "a") as f:
                f.write(f"{params.get('name')} {params.get('arguments', {}).get('text', '')}\n")
        if mode == "crash":
            os._exit(3)
        elif mode in ("hang", "block"):
            while True:
                time.sleep(3600)
        elif mode == "garbage":
            sys.stdout.write("this is not json-rpc\n")
            sys.stdout.flush()
        else:
            text = msg.get("params", {}).get("arguments", {}).get("text", "")
            meta = msg.get("params", {}).get("_meta", {})
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "content": [{"type": "text", "text": f"echo:{text}"}],
                "structuredContent": {"traceparent": meta.get("traceparent", "")},
                "isError": False,
            }})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "method not found"}})

if mode == "linger":
    while True:
        time.sleep(3600)
