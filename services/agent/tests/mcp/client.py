"""An MCP client on the official Python SDK (PyPI `mcp`), driven by services/agent/tests/mcp_server.rs.

Usage: client.py SETUP_JSON. SETUP names the transport ({"transport": "http", "url", "key", "headers"} or
{"transport": "stdio", "command", "args", "env"}), the scenario and its inputs; the script prints one JSON
object with what it saw (tool names, progress messages, elicitations, results) on stdout. A tool result is
{"is_error", "texts", "images": [mime types], "structured"}.
"""

import asyncio
import json
import sys
from contextlib import asynccontextmanager

import httpx2
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client


@asynccontextmanager
async def connect(setup, **session_args):
    if setup["transport"] == "http":
        headers = dict(setup.get("headers") or {})
        if setup.get("key"):
            headers["Authorization"] = f"Bearer {setup['key']}"
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(120.0)) as http:
            async with streamable_http_client(setup["url"], http_client=http) as (read, write):
                async with ClientSession(read, write, **session_args) as session:
                    await session.initialize()
                    yield session
    else:
        params = StdioServerParameters(
            command=setup["command"], args=setup.get("args", []), env=setup.get("env")
        )
        with open(setup["stderr"], "a") if setup.get("stderr") else sys.stderr as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write, **session_args) as session:
                    await session.initialize()
                    yield session


def result_of(result):
    texts, images = [], []
    for block in result.content:
        if block.type == "text":
            texts.append(block.text)
        elif block.type == "image":
            images.append(block.mime_type)
    return {
        "is_error": bool(result.is_error),
        "texts": texts,
        "images": images,
        "structured": result.structured_content,
    }


async def call(session, name, arguments, progress=None):
    try:
        result = await session.call_tool(name, arguments, progress_callback=progress)
        return result_of(result)
    except Exception as e:  # a protocol or transport error, reported as such
        return {"exception": f"{type(e).__name__}: {e}"}


class Recorder:
    def __init__(self, answers):
        self.progress = []
        self.elicitations = []
        self.answers = answers

    async def on_progress(self, progress, total, message):
        self.progress.append({"progress": progress, "total": total, "message": message})

    async def on_elicit(self, context, params):
        schema = params.requested_schema
        self.elicitations.append({"message": params.message, "schema": schema})
        properties = schema.get("properties", {}) if isinstance(schema, dict) else {}
        if "approve" in properties:
            return types.ElicitResult(action="accept", content={"approve": True, "reason": "fine by the test"})
        content = {name: self.answers.pop(0) if self.answers else "" for name in properties}
        return types.ElicitResult(action="accept", content=content)


async def scenario(setup):
    name = setup["scenario"]
    out = {}
    if name == "list":
        async with connect(setup) as session:
            tools = await session.list_tools()
            out["tools"] = sorted(t.name for t in tools.tools)
            out["protocol"] = session.protocol_version
    elif name == "run_elicit":
        recorder = Recorder(list(setup["answers"]))
        async with connect(setup, elicitation_callback=recorder.on_elicit) as session:
            out["run"] = await call(session, "run_task", setup["arguments"], recorder.on_progress)
        out["progress"] = recorder.progress
        out["elicitations"] = recorder.elicitations
    elif name == "run_without_elicitation":
        recorder = Recorder([])
        async with connect(setup) as session:
            waiting = await call(session, "run_task", setup["arguments"], recorder.on_progress)
            out["waiting"] = waiting
            structured = waiting.get("structured") or {}
            task_id = structured.get("task_id")
            ids = [q["id"] for q in structured.get("pending_questions") or []]
            out["answered"] = await call(
                session,
                "answer_task",
                {"task_id": task_id, "question_ids": ids, "answers": setup["answers"][: len(ids)]},
            )
            out["followed"] = await call(session, "follow_task", {"task_id": task_id}, recorder.on_progress)
        out["progress"] = recorder.progress
    elif name == "cancel":
        async with connect(setup) as session:
            waiting = await call(session, "run_task", setup["arguments"])
            out["waiting"] = waiting
            task_id = (waiting.get("structured") or {}).get("task_id")
            out["cancelled"] = await call(session, "cancel_task", {"task_id": task_id, "reason": "test"})
            out["followed"] = await call(session, "follow_task", {"task_id": task_id})
            out["got"] = await call(session, "get_task", {"task_id": task_id})
            out["listed"] = await call(session, "list_tasks", {"status": "cancelled"})
    elif name == "calls":
        # Each call of setup["calls"] ([tool, arguments]) in order; a tool error is a result, not a failure.
        async with connect(setup) as session:
            out["results"] = [await call(session, tool, arguments) for tool, arguments in setup["calls"]]
    elif name == "mousepad":
        # The desktop tools start mousepad (launch_app), type, save through the chooser, and end the
        # direct session; "calls" counts every desktop call made (each one a step of that session).
        ex = setup["executor"]
        loop = asyncio.get_running_loop()
        calls = []

        async def desk(tool, arguments):
            result = await call(session, tool, arguments)
            calls.append({"tool": tool, "step": (result.get("structured") or {}).get("step"),
                          "session_id": (result.get("structured") or {}).get("session_id")})
            return result

        def mousepads(result):
            # (id, title): a mousepad already running opens the new document in its own window, whose
            # title then changes, instead of a new window.
            listed = (result.get("structured") or {}).get("result") or []
            return [(w["id"], w["name"]) for w in listed if "mousepad" in w["name"].lower()]

        async with connect(setup) as session:
            before = set(mousepads(await desk("list_windows", {"executor": ex})))
            out["launched"] = await desk("launch_app", {"executor": ex, "name": "mousepad"})
            # Listed until a new mousepad window shows (bounded).
            deadline = loop.time() + 30
            window = None
            while window is None and loop.time() < deadline:
                windows = await desk("list_windows", {"executor": ex})
                window = next((w for w, title in mousepads(windows) if (w, title) not in before), None)
            out["windows"] = windows
            out["window_seen"] = window is not None
            if window is None:
                return out
            out["controls"] = await desk("list_controls", {"executor": ex, "window": window})
            out["typed"] = await desk("press_keys", {"executor": ex, "keys": setup["text"]})
            out["window_shot"] = await desk("screenshot", {"executor": ex, "window": window})
            out["marked_shot"] = await desk("screenshot", {"executor": ex, "window": window, "marks": True})
            out["save_as"] = await desk("press_keys", {"executor": ex, "keys": "^+s"})
            # Listed until the selected window's listing is the chooser's (bounded).
            deadline = loop.time() + 15
            name_field = None
            while name_field is None and loop.time() < deadline:
                chooser = await desk("list_controls", {"executor": ex})
                controls = (chooser.get("structured") or {}).get("result") or []
                name_field = next(
                    (c["id"] for c in controls if c.get("type") == "Edit" and c.get("name") == "Name:"), None
                )
            out["chooser_seen"] = name_field is not None
            if name_field is not None:
                out["path_typed"] = await desk(
                    "type_text", {"executor": ex, "control": name_field, "text": setup["path"]}
                )
                out["entered"] = await desk("press_keys", {"executor": ex, "keys": "{ENTER}"})
            out["desktop_shot"] = await desk("screenshot", {"executor": ex})
            out["ended"] = await call(session, "end_direct_session", {"executor": ex})
        out["calls"] = calls
    elif name == "connect":
        try:
            async with connect(setup) as session:
                out["tools"] = len((await session.list_tools()).tools)
        except BaseException as e:  # noqa: BLE001 - the refusal is what the test looks at
            out["exception"] = f"{type(e).__name__}: {e!r}"
    else:
        raise SystemExit(f"unknown scenario {name}")
    return out


def main():
    setup = json.loads(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1] != "-" else json.load(sys.stdin)
    out = asyncio.run(scenario(setup))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
