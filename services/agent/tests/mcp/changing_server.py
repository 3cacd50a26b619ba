#!/usr/bin/env python3
"""An MCP server (the official Python SDK, PyPI `mcp`) whose tool list changes while it runs, for the agent's
`notifications/tools/list_changed` test (services/agent/tests/mcp_agent.rs): it starts with one tool,
`unlock`; calling it adds a second, `late`, and tells the client with `notifications/tools/list_changed`.
"""
from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("changing")


def late(text: str) -> str:
    """Answers after it was added."""
    return f"late: {text}"


@server.tool()
async def unlock(ctx: Context) -> str:
    """Adds the tool `late` and announces the new list."""
    server.add_tool(late)
    await ctx.session.send_tool_list_changed()
    return "added late"


if __name__ == "__main__":
    server.run("stdio")
