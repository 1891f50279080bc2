#!/usr/bin/env bash
# The package as a user installs it (ctest's python_package_install, the
# fixture python_tests runs against):
#   python/tests/install_package.sh BUILD VENV
# makes a fresh virtual environment VENV with the system's site packages
# (torch comes from Debian's python3-torch), pip-installs this checkout into it
# with no network and no build isolation, building the native parts in the
# configured CMake folder BUILD (setup.py's SSDTRAIN_CMAKE_BUILD_DIR), then,
# from a scratch directory outside the repository, imports the installed
# package, runs its `ssdtrain` command and trains one step with offload.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "$1" && pwd)
venv=$(realpath -m "$2")
python=${SSDTRAIN_PYTHON:-/usr/bin/python3}

rm -rf "$venv"
"$python" -m venv --system-site-packages "$venv"
SSDTRAIN_CMAKE_BUILD_DIR=$build "$venv/bin/pip" install --no-build-isolation --no-index \
  --root-user-action=ignore --quiet "$root"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cd "$scratch"
"$venv/bin/ssdtrain" --help >/dev/null
"$venv/bin/python" - "$venv" "$root" <<'PY'
import os
import sys
import tempfile

import torch

import ssdtrain

venv, root = (os.path.realpath(p) for p in sys.argv[1:])
where = os.path.realpath(ssdtrain.__file__)
assert where.startswith(venv + os.sep), f"ssdtrain imported from {where}, not from {venv}"
assert not where.startswith(os.path.join(root, "python") + os.sep), f"imported the sources: {where}"

torch.manual_seed(0)
# Deep enough that the first layers' saved tensors are evicted and read back
# (the last leaf modules' are forwarded).
model = torch.nn.Sequential(*[m for _ in range(8) for m in (torch.nn.Linear(256, 256), torch.nn.GELU())])
x = torch.randn(512, 256)


def step(offload_dir=None):
    model.zero_grad()
    if offload_dir is None:
        model(x).pow(2).mean().backward()
        return None
    with ssdtrain.offload(model, dir=offload_dir, policy="offload-ssd") as off:
        model(x).pow(2).mean().backward()
    return off.stats()


step()
expected = [p.grad.clone() for p in model.parameters()]
with tempfile.TemporaryDirectory(dir=os.getcwd()) as d:
    stats = step(d)
    left = [f for _, _, files in os.walk(d) for f in files]
assert stats["ssd_bytes_written"] > 0 and stats["ssd_bytes_read"] > 0, stats
assert not left, f"files left: {left}"
for got, want in zip((p.grad for p in model.parameters()), expected):
    assert torch.equal(got, want), "gradients differ with offload"
print(f"installed ssdtrain: {where}; one step offloaded {stats['ssd_bytes_written']} bytes "
      f"and read them back, gradients bitwise equal")
PY
