"""A window that keeps drawing, for the settle tests and benchmark (issue 37): what a real desktop
always has somewhere — a caret blinking, a clock, another program typing.

    busy_window.py MODE TITLE X Y W H [PERIOD_MS]

MODE is one of
  blink   a caret-sized box shown and hidden every PERIOD_MS (default 530, GTK's blink half-period);
  clock   a label showing the time, redrawn every PERIOD_MS (default 1000);
  writer  a GTK text view (accessible: each character is an AT-SPI text-changed event, as another
          program typing into its editor sends) gaining a character every PERIOD_MS (default 30),
          emptied after 20 lines.
Prints "ready" once the window is mapped. Tk (Debian's python3-tk) except `writer` (python3-gi).
"""

import sys
import time
import tkinter as tk


def main() -> int:
    if len(sys.argv) not in (7, 8):
        print(__doc__, file=sys.stderr)
        return 2
    mode, title = sys.argv[1], sys.argv[2]
    x, y, w, h = (int(v) for v in sys.argv[3:7])
    defaults = {"blink": 530, "clock": 1000, "writer": 30}
    if mode not in defaults:
        print(f"unknown mode {mode!r}; one of {sorted(defaults)}", file=sys.stderr)
        return 2
    period = int(sys.argv[7]) if len(sys.argv) == 8 else defaults[mode]
    if mode == "writer":
        return writer(title, x, y, w, h, period)

    root = tk.Tk()
    root.title(title)
    root.geometry(f"{w}x{h}+{x}+{y}")
    root.resizable(False, False)
    canvas = tk.Canvas(root, width=w, height=h, background="white", highlightthickness=0)
    canvas.pack()

    if mode == "blink":
        caret = canvas.create_rectangle(10, 10, 12, 30, fill="black", outline="")
        state = {"on": True}

        def tick() -> None:
            state["on"] = not state["on"]
            canvas.itemconfigure(caret, state="normal" if state["on"] else "hidden")
            root.after(period, tick)

    else:
        label = canvas.create_text(8, 8, anchor="nw", font=("DejaVu Sans", 14), text="")

        def tick() -> None:
            canvas.itemconfigure(label, text=time.strftime("%H:%M:%S"))
            root.after(period, tick)

    announced = {"done": False}

    def mapped(_event: object) -> None:
        if not announced["done"]:
            announced["done"] = True
            print("ready", flush=True)

    root.bind("<Map>", mapped)
    root.after(period, tick)
    root.mainloop()
    return 0


def writer(title: str, x: int, y: int, w: int, h: int, period: int) -> int:
    import gi

    gi.require_version("Gtk", "3.0")
    from gi.repository import GLib, Gtk

    win = Gtk.Window(title=title)
    win.set_default_size(w, h)
    win.move(x, y)
    view = Gtk.TextView()
    win.add(view)
    buf = view.get_buffer()
    text = "the quick brown fox jumps over the lazy dog "
    state = {"i": 0}

    def tick() -> bool:
        if buf.get_line_count() > 20:
            buf.set_text("")
        buf.insert_at_cursor(text[state["i"] % len(text)])
        if state["i"] % 50 == 49:
            buf.insert_at_cursor("\n")
        state["i"] += 1
        return True

    def mapped(*_args: object) -> bool:
        print("ready", flush=True)
        return False

    win.connect("map-event", mapped)
    win.connect("destroy", Gtk.main_quit)
    win.show_all()
    GLib.timeout_add(period, tick)
    Gtk.main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
