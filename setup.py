"""Build hook: a wheel carries the package's kernels precompiled (see influence_gbdt/_warmup.py).

Everything else is in pyproject.toml. After the usual ``build_py``, the warmup workload compiles
every kernel for a CPU level most machines have (x86-64-v3 where the building machine has it, else
generic; ``INFLUENCE_GBDT_KERNEL_CPU`` chooses another, see ``influence_gbdt/_cpu.py``) into
``influence_gbdt/_kernels/`` of the build tree, so that the installed package compiles nothing at
first use (about 2.5 minutes on two cores; a build of sources built before on this machine takes the
result kept in the user's kernel cache instead, see ``influence_gbdt._warmup.ship``). An editable
install (``pip install -e``) skips it and compiles at first use, into the user cache; so does any build
where the warmup fails (the reason is printed) or ``INFLUENCE_GBDT_NO_PRECOMPILE=1`` is set.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithKernels(build_py):
    """``build_py``, then the precompiled kernels into the build tree."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False) or os.environ.get("INFLUENCE_GBDT_NO_PRECOMPILE"):
            return
        build_lib = os.path.abspath(self.build_lib)
        target = os.path.join(build_lib, "influence_gbdt", "_kernels")
        shutil.rmtree(target, ignore_errors=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
        # pip's isolated build environment reaches its packages (numpy, numba) through PYTHONPATH.
        path = os.pathsep.join(p for p in (build_lib, env.get("PYTHONPATH")) if p)
        env.update(PYTHONPATH=path, INFLUENCE_GBDT_QUIET="1")
        # Run in the build tree: ``python -m`` puts the working directory (the source tree, whose
        # adapters/ sits outside the package) first on sys.path.
        done = subprocess.run([sys.executable, "-m", "influence_gbdt._warmup", "--ship", target], env=env,
                              cwd=build_lib, check=False)
        if done.returncode:
            shutil.rmtree(target, ignore_errors=True)
            print("influence-gbdt: could not precompile the kernels (see above); they will compile at first "
                  "use instead.", file=sys.stderr)


setup(cmdclass={"build_py": BuildWithKernels})
