"""recipe.process_exit: a process that asked for it ends without its final garbage collections."""

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# An object only a reference cycle keeps alive: the interpreter's final collections are what free it, and its
# __del__ says so. (gc.disable() keeps a collection from freeing it before the exit.)
PROGRAM = """
import gc, sys
class Cycle:
    def __del__(self):
        sys.stdout.write("collected at exit\\n")
cycle = Cycle()
cycle.itself = cycle
del cycle
gc.disable()
if {skip}:
    from recipe.process_exit import skip_final_collections
    skip_final_collections()
    skip_final_collections()  # a second call (a debug executor's next job) changes nothing
sys.stdout.write("end of program\\n")
"""


@pytest.mark.parametrize("skip", [False, True])
def test_the_final_collections_are_skipped_only_when_asked(skip):
    result = subprocess.run([sys.executable, "-c", PROGRAM.format(skip=skip)], capture_output=True, text=True,
                            cwd=REPO, timeout=60)
    assert result.returncode == 0, result.stderr
    expected = ["end of program"] if skip else ["end of program", "collected at exit"]
    assert result.stdout.splitlines() == expected
