"""Ctrl-C for every command: one line ("interrupted"), exit status 130, within a second.

Kept free of heavy imports so that :func:`watch_interrupts` is in place before the rest of tagql loads."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

EXIT_INTERRUPTED = 130

_announced = threading.Event()


def announce_interrupt(as_json: bool = False) -> None:
    """Say "interrupted" once, however many paths notice Ctrl-C."""
    if _announced.is_set():
        return
    _announced.set()
    if as_json:
        sys.stdout.write(json.dumps({"ok": False, "error": "interrupted"}) + "\n")
        sys.stdout.flush()
    else:
        sys.stderr.write("interrupted\n")
        sys.stderr.flush()



def watch_interrupts(grace_s: float = 0.5) -> None:
    """Make Ctrl-C end the process within a second, whatever it is doing.

    Python raises ``KeyboardInterrupt`` only between bytecodes, so a long call into llama.cpp (loading
    the model, evaluating a prompt) would hold it for seconds. The C-level signal handler writes to a
    wakeup pipe at once; a watcher thread reads it, gives the main thread ``grace_s`` to unwind cleanly
    (stores commit or roll back in SQLite transactions, files are written by atomic rename), then exits
    with status 130 itself."""
    if threading.current_thread() is not threading.main_thread():
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)

    def watch() -> None:
        while os.read(read_fd, 1) != bytes([signal.SIGINT]):
            pass
        time.sleep(grace_s)
        announce_interrupt("--json" in sys.argv)
        os._exit(EXIT_INTERRUPTED)

    threading.Thread(target=watch, name="tagql-interrupt", daemon=True).start()
