#!/usr/bin/env python3
"""LibreOffice Calc's own API (UNO) as an MCP server, written with the official Python MCP SDK (PyPI `mcp`):
the application API of the suite's `calc-fill-api` task (docs/mcp.md), the shape of UFO²'s Excel executor.

  calc_uno.py launch DOCUMENT   start LibreOffice Calc on DOCUMENT (a .csv or .ods) with a UNO accept pipe
                                and a private profile beside the document (first-start dialogs off)
  calc_uno.py serve DOCUMENT    the MCP server (stdio) for that document: tools set_cells, get_cells, save

Both derive the same pipe name from DOCUMENT's absolute path, so a suite run's tasks never share one. The
server connects on each call (LibreOffice may start after it), finds the open document by its URL, and acts
through UNO only: XCellRange.setDataArray / getDataArray and XStorable.store.

Debian's `python3-uno` installs `uno` for /usr/bin/python3; another Python 3.11 (the one with the SDK) loads
it from /usr/lib/python3/dist-packages, appended to the path so the SDK's own packages come first.
"""
import hashlib
import os
import re
import sys
import time

UNO_PATHS = ["/usr/lib/python3/dist-packages", "/usr/lib/libreoffice/program"]


def pipe_name(document):
    digest = hashlib.sha1(os.path.abspath(document).encode()).hexdigest()[:16]
    return f"ufo-calc-{digest}"


def launch(document):
    document = os.path.abspath(document)
    profile = os.path.join(os.path.dirname(document), "lo-profile")
    user = os.path.join(profile, "user")
    os.makedirs(user, exist_ok=True)
    # No tip of the day, no "what's new" bar, no recovery or first-start wizard, and Ctrl+S keeps a CSV a
    # CSV without asking (WarnAlienFormat off): a person's machine past its first day.
    with open(os.path.join(user, "registrymodifications.xcu"), "w") as f:
        f.write(
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<oor:items xmlns:oor="http://openoffice.org/2001/registry" '
            'xmlns:xs="http://www.w3.org/2001/XMLSchema" '
            'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">\n'
            '<item oor:path="/org.openoffice.Office.Common/Misc"><prop oor:name="ShowTipOfTheDay" oor:op="fuse">'
            "<value>false</value></prop></item>\n"
            '<item oor:path="/org.openoffice.Office.Common/Misc"><prop oor:name="FirstRun" oor:op="fuse">'
            "<value>false</value></prop></item>\n"
            '<item oor:path="/org.openoffice.Setup/Product"><prop oor:name="ooSetupLastVersion" oor:op="fuse">'
            "<value>99.0</value></prop></item>\n"
            '<item oor:path="/org.openoffice.Setup/Office"><prop oor:name="ooSetupInstCompleted" oor:op="fuse">'
            "<value>true</value></prop></item>\n"
            '<item oor:path="/org.openoffice.Office.Common/Save/Document"><prop oor:name="WarnAlienFormat" '
            'oor:op="fuse"><value>false</value></prop></item>\n'
            '<item oor:path="/org.openoffice.Office.Recovery/AutoSave"><prop oor:name="Enabled" oor:op="fuse">'
            "<value>false</value></prop></item>\n"
            "</oor:items>\n"
        )
    args = [
        "soffice",
        "--calc",
        "--norestore",
        "--nologo",
        "--nodefault",
        f"-env:UserInstallation=file://{profile}",
        f"--accept=pipe,name={pipe_name(document)};urp;",
    ]
    if document.endswith(".csv"):
        # Comma-separated, UTF-8, from line 1: opened without the import dialog.
        args.append("--infilter=CSV:44,34,76,1")
    args.append(document)
    os.execvp("soffice", args)


def serve(document):
    for p in UNO_PATHS:
        if p not in sys.path:
            sys.path.append(p)
    import uno  # noqa: E402  (needs the paths above)
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    document = os.path.abspath(document)
    url = uno.systemPathToFileUrl(document)
    pipe = pipe_name(document)
    server = MCPServer(
        "calc-uno",
        instructions=f"LibreOffice Calc's own API for {os.path.basename(document)}: "
        "cells are set and read by range through UNO, without the GUI.",
    )

    def the_document():
        local = uno.getComponentContext()
        resolver = local.ServiceManager.createInstanceWithContext("com.sun.star.bridge.UnoUrlResolver", local)
        deadline = time.monotonic() + 20
        while True:
            try:
                ctx = resolver.resolve(f"uno:pipe,name={pipe};urp;StarOffice.ComponentContext")
                break
            except Exception as e:  # NoConnectException while LibreOffice starts
                if time.monotonic() > deadline:
                    raise ToolError(f"LibreOffice is not accepting on pipe {pipe}: {e}") from e
                time.sleep(0.2)
        desktop = ctx.ServiceManager.createInstanceWithContext("com.sun.star.frame.Desktop", ctx)
        components = desktop.Components.createEnumeration()
        while components.hasMoreElements():
            doc = components.nextElement()
            if getattr(doc, "URL", "") == url and hasattr(doc, "Sheets"):
                return doc
        raise ToolError(f"{document} is not open in LibreOffice Calc")

    def cell_range(doc, sheet, rng):
        if not re.fullmatch(r"[A-Za-z]{1,3}[0-9]{1,7}(:[A-Za-z]{1,3}[0-9]{1,7})?", rng):
            raise ToolError(f"range {rng!r} is not A1 or A1:C9")
        sheets = doc.Sheets
        if sheet:
            if not sheets.hasByName(sheet):
                raise ToolError(f"no sheet {sheet!r}; sheets: {', '.join(sheets.ElementNames)}")
            target = sheets.getByName(sheet)
        else:
            target = sheets.getByIndex(0)
        return target.getCellRangeByName(rng.upper())

    @server.tool()
    def set_cells(range: str, values: list[list[str | float]], sheet: str = "") -> str:
        """Writes a rectangle of values: `range` in A1 notation (e.g. "A1:B10"), `values` one list per row,
        exactly as many rows and columns as the range. Numbers are stored as numbers. Sheet: the first
        unless named."""
        doc = the_document()
        cells = cell_range(doc, sheet, range)
        addr = cells.RangeAddress
        rows, cols = addr.EndRow - addr.StartRow + 1, addr.EndColumn - addr.StartColumn + 1
        if len(values) != rows or any(len(r) != cols for r in values):
            shape = f"{len(values)} rows of {sorted({len(r) for r in values})} columns"
            raise ToolError(f"range {range} is {rows}x{cols} but values are {shape}")
        data = tuple(tuple(float(v) if isinstance(v, (int, float)) else str(v) for v in row) for row in values)
        cells.setDataArray(data)
        return f"set {rows * cols} cells in {range.upper()}"

    @server.tool()
    def get_cells(range: str, sheet: str = "") -> list[list[str | float]]:
        """Reads a rectangle of values (A1 notation), one list per row; empty cells are ""."""
        return [list(row) for row in cell_range(the_document(), sheet, range).getDataArray()]

    @server.tool()
    def save() -> str:
        """Saves the document in its own file and format (a .csv stays comma-separated text)."""
        doc = the_document()
        doc.store()
        return f"saved {document}"

    server.run("stdio")


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("launch", "serve"):
        sys.exit(__doc__)
    if sys.argv[1] == "launch":
        launch(sys.argv[2])
    else:
        serve(sys.argv[2])


if __name__ == "__main__":
    main()
