"""The garbage collector paused while a step builds many objects that stay alive.

The expansion of a 10^5-run sweep builds some 10^6 objects (a Job and a Row per run, their strings and lists),
every one of which lives on; the collector's passes over the growing heap found nothing to free and took a fifth
of the expansion's time (0.1 s of a 10^5-run parse). ``paused`` switches the automatic collections off for the
block and back to what they were after it, however it ends; nothing is lost: a cycle made meanwhile is collected
by the next pass after it.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No automatic garbage collection inside the block; the collector as it was (enabled or not) after it."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
