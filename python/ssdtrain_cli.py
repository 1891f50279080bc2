"""The `ssdtrain` console command of an installed package: runs the binary the
package carries (ssdtrain/bin/ssdtrain, with the configs beside it).

A module of its own, outside the `ssdtrain` package: importing anything inside
the package runs its __init__, which imports torch (about a second), and the
command only needs the binary's path, which find_spec gives without importing."""

import importlib.util
import os
import sys


def binary():
    """The path of the installed package's `ssdtrain` binary."""
    spec = importlib.util.find_spec("ssdtrain")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("ssdtrain: the ssdtrain package is not installed in this Python")
    return os.path.join(list(spec.submodule_search_locations)[0], "bin", "ssdtrain")


def main():
    path = binary()
    if not os.access(path, os.X_OK):
        sys.exit(f"ssdtrain: {path} is missing or not executable: this package was not "
                 "installed with its binary (pip install builds it)")
    os.execv(path, [path, *sys.argv[1:]])
