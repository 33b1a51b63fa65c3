"""benchmarks/beside_aitune.py's import stand-ins (for what AITune imports when it loads): a library that is not installed imports as a stand-in (submodules, classes
to subclass, enum values as keys, calls), one that is installed stays the real one, and what was stood in
is listed. Run in a child process so this one's import system is untouched."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

CHILD = """
import json, sys
sys.path.insert(0, sys.argv[1])
import beside_aitune
served = beside_aitune.install_stand_ins(["no_such_library_xyz", "json"])
import no_such_library_xyz as trt
from no_such_library_xyz.onnx.autocast import convert_to_mixed_precision

class Allocator(trt.IOutputAllocator):      # subclassed when the importing package loads
    def __init__(self):
        super().__init__()
        self.ready = True

table = {trt.DataType.HALF: "half", trt.DataType.FLOAT: "float"}
logger = trt.Logger(trt.Logger.WARNING)
print(json.dumps({"served": served, "used": beside_aitune.stand_ins_used(), "ready": Allocator().ready,
                  "keys": len(table), "json_real": json.__file__ is not None and hasattr(json, "dumps"),
                  "converted": type(convert_to_mixed_precision("model.onnx")).__name__,
                  "logged": type(logger.log(1, "x")).__name__, "version": trt.__version__}))
"""


def test_an_absent_library_imports_as_a_stand_in_and_a_present_one_stays_real():
    out = subprocess.run([sys.executable, "-c", CHILD, str(REPO / "benchmarks")], capture_output=True, text=True,
                         check=True, timeout=60)
    got = json.loads(out.stdout)
    assert got["served"] == ["no_such_library_xyz"]                       # json was found for real
    assert got["used"] == ["no_such_library_xyz", "no_such_library_xyz.onnx", "no_such_library_xyz.onnx.autocast"]
    assert got["ready"] and got["keys"] == 2 and got["json_real"] and got["version"] == "0.0.0"
    assert got["converted"] == "convert_to_mixed_precision" and got["logged"] == "log"
