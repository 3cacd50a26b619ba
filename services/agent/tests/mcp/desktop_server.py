#!/usr/bin/env python3
"""An MCP server (the official Python SDK, PyPI `mcp`) that tells where it runs, for the tests of MCP
servers started on the desktop's side through the executor (services/agent/tests/mcp_desktop.rs,
services/executor/tests/mcp_stdio.rs): its tool `where` answers (as JSON text) its pid, its parent's pid and the
environment variables it is asked about; `add` adds two numbers.
"""
import json
import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("desktop")


@server.tool()
def where(names: list[str]) -> str:
    """Where this server runs (JSON): its pid, its parent's pid and the values of the named variables."""
    return json.dumps({
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "env": {n: os.environ.get(n) for n in names},
    })


@server.tool()
def add(a: int, b: int) -> str:
    """Adds a and b."""
    return str(a + b)


if __name__ == "__main__":
    server.run("stdio")
