"""A Dask task's argument handed over whole: ``Packed`` and ``call_packed``.

At submit, Dask walks a dict, list or tuple argument element by element, looking for futures and keys to
depend on (``dask._task_spec.parse_input``): a shard's spec of 10^4 grid values (a dict of params each) cost
1 s there, in the solve process, before any worker started. The solve step's arguments are plain data and never
hold a future, so they travel inside one object Dask does not look into, pickled as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Packed:
    """One argument of a task, opaque to Dask's submit (``value``: plain data, no futures)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __getstate__(self) -> Any:
        return self.value

    def __setstate__(self, value: Any) -> None:
        self.value = value


def call_packed(function: Callable, packed: Packed) -> Any:
    """``function(packed.value)``, on the worker: the task of a ``Packed`` argument."""
    return function(packed.value)
