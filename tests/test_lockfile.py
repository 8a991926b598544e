"""runners.core.lock: a second holder waits for the first."""
from __future__ import annotations

import threading
import time
from pathlib import Path

from runners.core.lock import exclusive


def test_second_holder_waits_for_the_first(tmp_path: Path) -> None:
    lock = tmp_path / "sub" / "cell.lock"
    order: list[str] = []
    held = threading.Event()

    def first() -> None:
        with exclusive(lock, "first"):
            held.set()
            time.sleep(0.3)
            order.append("first done")

    t = threading.Thread(target=first)
    t.start()
    held.wait(5)
    with exclusive(lock, "second"):  # flock: separate open files conflict, also within one process
        order.append("second in")
    t.join()
    assert order == ["first done", "second in"]
