#!/usr/bin/env bash
# Installs ssdtrain's build and test dependencies from Debian 12's packages,
# only what is missing. Idempotent; needs root (or sudo) when something is missing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  nlohmann-json3-dev libeigen3-dev liburing-dev libcli11-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  fio
  # compiler cache: rebuilds and second clones compile only what changed
  ccache
  # sanitizer builds and fuzzers (scripts/sanitize.sh, scripts/fuzz.sh): clang 14,
  # its sanitizer and libFuzzer runtimes, llvm-symbolizer for readable reports
  clang libclang-rt-14-dev llvm
  # plots and the walkthrough notebook (run with /usr/bin/python3)
  python3-matplotlib jupyter-nbconvert python3-nbformat python3-ipykernel
  # the Python package (python/): pybind11 module, tested with Debian's torch (CPU)
  pybind11-dev python3-dev python3-torch
  # pip install of the package (pyproject.toml, setup.py) into a virtual
  # environment, and its wheel (python3 -m build --no-isolation)
  python3-pip python3-venv python3-setuptools python3-wheel python3-build
  # Chakra execution traces decoded by an independent reader in the tests:
  # protoc makes Python's protobuf module from traces/schema/chakra_et.proto
  protobuf-compiler python3-protobuf
  # an optimized BLAS for Debian's torch and numpy: without it libblas.so.3 is the
  # reference BLAS (about 1.3 GFLOP/s here against 60: the Python tests and the
  # notebook ran ten times longer); the OpenMP build follows torch.set_num_threads
  libopenblas0-openmp
  # multi-rank replays (mpirun -np N ssdtrain replay): Open MPI
  openmpi-bin libopenmpi-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
echo "ssdtrain: installing ${missing[*]}" >&2
sudo_cmd=()
if [[ $(id -u) != 0 ]]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
# Refresh the package lists once per day at most (or when they were never fetched).
stamp=/var/lib/apt/periodic/ssdtrain-update-stamp
if [[ ! -f $stamp ]] || [[ -n $(find "$stamp" -mmin +1440 2>/dev/null) ]]; then
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" mkdir -p "$(dirname "$stamp")"
  "${sudo_cmd[@]}" touch "$stamp"
fi
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
