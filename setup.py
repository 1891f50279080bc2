"""Builds the `ssdtrain` package's native parts with the project's CMake.

pyproject.toml holds the metadata; this file adds one build step: CMake
configures and builds the engine module (ssdtrain._engine) and the `ssdtrain`
binary, and they are copied into the package with the configs:

    ssdtrain/_engine.<abi>.so
    ssdtrain/bin/ssdtrain
    ssdtrain/share/ssdtrain/configs/   (the binary's installed configs)

Environment:
    SSDTRAIN_CMAKE_BUILD_DIR  an already configured build folder of this
                              checkout (e.g. build/) to build the two targets
                              in, as configured; default: build-pip/cmake,
                              configured here without tests or benchmarks
    SSDTRAIN_CMAKE_ARGS       extra configure arguments (default build only)
    SSDTRAIN_JOBS             build parallelism (default: the CPU count)
"""

import glob
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def run(self):
        build = os.environ.get("SSDTRAIN_CMAKE_BUILD_DIR")
        jobs = os.environ.get("SSDTRAIN_JOBS", str(os.cpu_count() or 1))
        if build:
            build = os.path.abspath(build)
            if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
                sys.exit(f"SSDTRAIN_CMAKE_BUILD_DIR={build}: not a configured CMake build "
                         "folder (no CMakeCache.txt)")
        else:
            build = os.path.join(ROOT, "build-pip", "cmake")
            configure = ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                         "-DSSDTRAIN_BUILD_TESTS=OFF", "-DSSDTRAIN_BUILD_BENCHMARKS=OFF",
                         "-DSSDTRAIN_PYTHON=ON", f"-DSSDTRAIN_PYTHON_EXECUTABLE={sys.executable}"]
            configure += shlex.split(os.environ.get("SSDTRAIN_CMAKE_ARGS", ""))
            self._run(configure)
        self._run(["cmake", "--build", build, "-j", jobs, "--target", "ssdtrain_engine",
                   "ssdtrain"])

        for ext in self.extensions:
            built = glob.glob(os.path.join(build, "python", "ssdtrain", "_engine*.so"))
            if len(built) != 1:
                sys.exit(f"{build}/python/ssdtrain: expected one _engine module, found {built}")
            target = self.get_ext_fullpath(ext.name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(built[0], target)
        package = os.path.join(self.build_lib, "ssdtrain")
        os.makedirs(os.path.join(package, "bin"), exist_ok=True)
        shutil.copy2(os.path.join(build, "app", "ssdtrain"), os.path.join(package, "bin"))
        configs = os.path.join(package, "share", "ssdtrain", "configs")
        shutil.rmtree(configs, ignore_errors=True)
        shutil.copytree(os.path.join(ROOT, "configs"), configs)

    @staticmethod
    def _run(cmd):
        print("ssdtrain setup.py:", " ".join(shlex.quote(c) for c in cmd), flush=True)
        subprocess.run(cmd, check=True)


os.makedirs(os.path.join(ROOT, "build-pip"), exist_ok=True)  # egg_base must exist
setup(
    ext_modules=[CMakeExtension("ssdtrain._engine")],
    cmdclass={"build_ext": CMakeBuild},
    # Out of the CMake tree's way: the project's own build/ is a CMake folder.
    options={"build": {"build_base": os.path.join("build-pip", "setuptools")},
             "egg_info": {"egg_base": "build-pip"}},
)
