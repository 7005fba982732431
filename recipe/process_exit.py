"""A quick exit for the processes a run starts: skip the garbage collections Python makes on the way out.

A process that imported torch's compiler stack (any transformers model class imports it) tracks ~440,000
objects for the garbage collector, and the interpreter's finalization walks them in its last cyclic collections
before the process ends: 1.2-2.3 s of CPU spent freeing memory the operating system takes back anyway
(BENCHMARKS.md, "A quicker exit"). A PipelineRL run's supervisor waits for its roles' exit, and a sweep's driver
for its job process's, so that time was paid at the end of every job. gc.freeze() at exit moves every live
object to the permanent generation, which collections skip.

What it gives up: the __del__ of objects that only a reference cycle keeps alive when the process ends (which
Python does not promise to run at exit anyway). atexit handlers, weakref.finalize callbacks and multiprocessing's
queue flushing still run, and every file this project writes is closed where it is written (`with` blocks).
"""

from __future__ import annotations

import atexit
import gc


def skip_final_collections() -> None:
    """From now on this process exits without its final cyclic garbage collections (gc.freeze at exit).

    Idempotent: a caller that runs many times in one process (a debug executor's jobs) registers it once.
    """
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)
