"""What an optional resource may use of the server it serves: the part of the scheduler's shared
state (attempts/context.py's ``SchedulerState`` has it all) that a resource reads and changes."""

from __future__ import annotations

import threading
from typing import Any, Callable, Protocol

from apportion.executors.base import Executor
from apportion.serve.base.slots import Node, Slot
from apportion.serve.store.state import StateStore


class Host(Protocol):
    """The server as a resource sees it. ``config`` is the server's settings (``ServeConfig``);
    ``dirty`` asks for a round as soon as the idle slots might be filled; ``lock`` is the state lock
    (rounds hold it), ``clock`` the server's time, ``log`` its log."""

    store: StateStore
    executor: Executor
    config: Any
    slots: list[Slot]
    gpu_types: tuple[str, ...]
    node: Node
    dirty: bool
    lock: threading.RLock
    clock: Callable[[], float]
    log: Callable[[str], None]
