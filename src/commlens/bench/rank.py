"""``python -m commlens.bench.rank MODULE [ARGS...]``: one rank as ``launch_ranks`` starts it.

It asks the kernel, first thing (before the rank imports torch, which takes seconds), to kill this process
when the launcher dies, even by SIGKILL (``lifetime.die_with_parent``), then runs ``python -m MODULE ARGS``
in this process. Imports nothing heavy, so the time a rank could outlive a killed launcher is the
interpreter's start-up.
"""

from __future__ import annotations

import os
import runpy
import sys

from commlens.bench.lifetime import LAUNCHER_PID_ENV, die_with_parent


def main() -> None:
    if len(sys.argv) < 2:
        print("usage: python -m commlens.bench.rank MODULE [ARGS...]", file=sys.stderr)
        raise SystemExit(2)
    launcher = os.environ.get(LAUNCHER_PID_ENV)
    if launcher:
        die_with_parent(int(launcher))
    module, *args = sys.argv[1:]
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
