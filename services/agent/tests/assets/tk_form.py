#!/usr/bin/env python3
"""A Tk form without accessibility (Tk has no AT-SPI bridge on Linux) that writes its own ground truth.

Usage: tk_form.py TRUTH.json [--banner TEXT]

Draws >= 30 text-bearing widgets (a menu bar of menubuttons, labels, buttons, entries with text, check and
radio buttons, a listbox, canvas text) at three font sizes in a 1280x800 window at the screen's top-left,
then writes, for every widget, its own geometry (winfo) and the box of its text (from Tk's font metrics),
in screen pixels, as JSON; the file appears (renamed into place) only once everything is drawn, and then
"ready" is printed on stdout.
"""
import json
import os
import sys
import tkinter as tk
from tkinter import font as tkfont

truth_path = sys.argv[1]
banner = None
if len(sys.argv) > 3 and sys.argv[2] == "--banner":
    banner = sys.argv[3]

root = tk.Tk()
root.title("Tk grounding form")
root.geometry("1280x800+0+0")
root.configure(background="#f0f0f0")

SIZES = [-13, -17, -22]  # pixel sizes: small, medium, large
WORDS = [
    ["File", "Edit", "View", "Help"],
    ["Name", "Address", "Phone", "Email"],
    ["Submit", "Cancel", "Apply", "Reset"],
    ["alpha", "bravo", "charlie"],
    ["Remember me", "Newsletter"],
    ["Small", "Large"],
    ["Apples", "Oranges", "Cherries"],
    ["Canvas title"],
]
widgets = []  # (widget, kind, text, font)


def text_box_centered(w, text, f):
    x, y = w.winfo_rootx(), w.winfo_rooty()
    cx, cy = x + w.winfo_width() / 2, y + w.winfo_height() / 2
    tw, th = f.measure(text), f.metrics("linespace")
    return [cx - tw / 2, cy - th / 2, cx + tw / 2, cy + th / 2]


def text_box_right(w, text, f):
    # check/radio buttons with padx=0, bd=0 and no highlight: the text ends at the widget's right edge
    x, y = w.winfo_rootx(), w.winfo_rooty()
    right = x + w.winfo_width()
    cy = y + w.winfo_height() / 2
    tw, th = f.measure(text), f.metrics("linespace")
    return [right - tw, cy - th / 2, right, cy + th / 2]


def text_box_left(w, text, f, inset):
    x, y = w.winfo_rootx(), w.winfo_rooty()
    cy = y + w.winfo_height() / 2
    tw, th = f.measure(text), f.metrics("linespace")
    return [x + inset, cy - th / 2, x + inset + tw, cy + th / 2]


col = 0
for size in SIZES:
    f = tkfont.Font(family="DejaVu Sans", size=size)
    frame = tk.Frame(root, background="#f0f0f0")
    frame.grid(row=0, column=col, sticky="nw", padx=20, pady=10)
    col += 1
    r = 0
    bar = tk.Frame(frame, background="#dcdcdc")
    bar.grid(row=r, column=0, columnspan=2, sticky="w", pady=(0, 8))
    r += 1
    for word in WORDS[0]:
        m = tk.Menubutton(bar, text=word, font=f, background="#dcdcdc", relief="flat")
        menu = tk.Menu(m, tearoff=0)
        menu.add_command(label=word + " item")
        m["menu"] = menu
        m.pack(side="left", padx=4)
        widgets.append((m, "menubutton", word, f, "center"))
    for word in WORDS[1]:
        lab = tk.Label(frame, text=word, font=f, background="#f0f0f0")
        lab.grid(row=r, column=0, sticky="w", pady=3)
        widgets.append((lab, "label", word, f, "center"))
        e = tk.Entry(frame, font=f, width=12, bd=1, highlightthickness=0, relief="solid")
        e.insert(0, word.lower() + " value")
        e.grid(row=r, column=1, sticky="w", padx=6, pady=3)
        widgets.append((e, "entry", word.lower() + " value", f, "left"))
        r += 1
    btns = tk.Frame(frame, background="#f0f0f0")
    btns.grid(row=r, column=0, columnspan=2, sticky="w", pady=6)
    r += 1
    for word in WORDS[2][:2]:
        b = tk.Button(btns, text=word, font=f)
        b.pack(side="left", padx=4)
        widgets.append((b, "button", word, f, "center"))
    for word in WORDS[4]:
        c = tk.Checkbutton(frame, text=word, font=f, padx=0, bd=0, highlightthickness=0,
                           background="#f0f0f0")
        c.grid(row=r, column=0, columnspan=2, sticky="w", pady=2)
        widgets.append((c, "checkbutton", word, f, "right"))
        r += 1
    v = tk.StringVar(value=WORDS[5][0])
    for word in WORDS[5]:
        rb = tk.Radiobutton(frame, text=word, variable=v, value=word, font=f, padx=0, bd=0,
                            highlightthickness=0, background="#f0f0f0")
        rb.grid(row=r, column=0, columnspan=2, sticky="w", pady=2)
        widgets.append((rb, "radiobutton", word, f, "right"))
        r += 1
    lb = tk.Listbox(frame, font=f, height=3, width=12, bd=0, highlightthickness=0,
                    selectborderwidth=0, activestyle="none", exportselection=False)
    for word in WORDS[6]:
        lb.insert("end", word)
    lb.grid(row=r, column=0, columnspan=2, sticky="w", pady=6)
    widgets.append((lb, "listbox", None, f, None))
    r += 1
    cv = tk.Canvas(frame, width=240, height=50, background="white", highlightthickness=0)
    item = cv.create_text(10, 25, text=WORDS[7][0], font=f, anchor="w")
    cv.grid(row=r, column=0, columnspan=2, sticky="w", pady=6)
    widgets.append((cv, "canvas", (item, WORDS[7][0]), f, None))
    r += 1

if banner is not None:
    f = tkfont.Font(family="DejaVu Sans", size=-20, weight="bold")
    lab = tk.Label(root, text=banner, font=f, foreground="#a00000", background="#f0f0f0")
    lab.grid(row=1, column=0, columnspan=3, sticky="w", padx=20, pady=20)
    widgets.append((lab, "label", banner, f, "center"))


def write_truth():
    root.update()
    out = []
    for w, kind, text, f, how in widgets:
        x, y = w.winfo_rootx(), w.winfo_rooty()
        wbox = [x, y, x + w.winfo_width(), y + w.winfo_height()]
        if kind == "listbox":
            for i in range(w.size()):
                bx, by, bw, bh = w.bbox(i)
                word = w.get(i)
                out.append({"kind": "listitem", "text": word, "widget": [x, y + by, x + w.winfo_width(), y + by + bh],
                            "text_box": [x + bx, y + by, x + bx + f.measure(word), y + by + bh]})
            continue
        if kind == "canvas":
            item, word = text
            x1, y1, x2, y2 = w.bbox(item)
            out.append({"kind": "canvastext", "text": word, "widget": [x + x1, y + y1, x + x2, y + y2],
                        "text_box": [x + x1, y + y1, x + x2, y + y2]})
            continue
        if how == "center":
            tb = text_box_centered(w, text, f)
        elif how == "right":
            tb = text_box_right(w, text, f)
        else:
            tb = text_box_left(w, text, f, int(w["bd"]) + 1)
        out.append({"kind": kind, "text": text, "widget": wbox, "text_box": [round(v) for v in tb]})
    tmp = truth_path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump({"screen": [root.winfo_screenwidth(), root.winfo_screenheight()], "widgets": out}, fh)
    os.replace(tmp, truth_path)
    print("ready", flush=True)


root.after(200, lambda: (root.update_idletasks(), write_truth()))
root.mainloop()
