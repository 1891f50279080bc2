#!/usr/bin/env python3
"""The table scripts/gpu-check.sh prints last.

    scripts/gpu_check_summary.py OUT

OUT holds, for each policy (keep, offload-ssd), the run files of
`ssdtrain replay`: run-POLICY.json (with --verify) and time-POLICY.json
(without, for the step times). Prints one row per policy and the offload/keep
ratios; exits 1 when a replay did not verify, and with a message naming the
file and the field when a run file lacks one (never a traceback).
Standard library only: runs with any python3.
"""
import json
import sys

POLICIES = ("keep", "offload-ssd")
MiB = 2**20


class RunFileError(Exception):
    pass


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except OSError as e:
        raise RunFileError(f"{path}: cannot read: {e.strerror}")
    except json.JSONDecodeError as e:
        raise RunFileError(f"{path}: not JSON: {e}")


def field(run, path, dotted, kind):
    """run's field at `dotted` (e.g. "extra.tensors_checked"), of type `kind`."""
    value = run
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            raise RunFileError(f"{path}: no field \"{dotted}\" (expected a run file of "
                               "`ssdtrain replay`)")
        value = value[key]
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise RunFileError(f"{path}: field \"{dotted}\": expected {kind.__name__}, "
                           f"got {json.dumps(value)}")
    return value


def row(out, policy):
    vpath, tpath = f"{out}/run-{policy}.json", f"{out}/time-{policy}.json"
    v, t = load(vpath), load(tpath)
    return {
        "policy": policy,
        "step_ms": field(t, tpath, "step_time_ns", int) / 1e6,
        "exposed_ms": field(t, tpath, "exposed_io_ns", int) / 1e6,
        "peak_MiB": field(t, tpath, "peak_device_bytes", int) / MiB,
        "act_MiB": field(t, tpath, "peak_activation_bytes", int) / MiB,
        "wrote_MiB": field(t, tpath, "ssd_bytes_written", int) / MiB,
        "read_MiB": field(t, tpath, "ssd_bytes_read", int) / MiB,
        # `verified` is null in a run without --verify, so the verified run's
        # must be a bool; its count of checked tensors is under "extra".
        "verified": field(v, vpath, "verified", bool),
        "checked": field(v, vpath, "extra.tensors_checked", int),
    }


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        rows = [row(argv[1], p) for p in POLICIES]
    except RunFileError as e:
        print(f"gpu-check: FAILED: {e}", file=sys.stderr)
        return 1
    print(f"{'policy':<12} {'step ms':>9} {'exposed ms':>10} {'peak MiB':>9} {'act MiB':>8} "
          f"{'wrote MiB':>9} {'read MiB':>9} {'verified':>12}")
    for r in rows:
        verified = f"{r['verified']} ({r['checked']})"
        print(f"{r['policy']:<12} {r['step_ms']:9.3f} {r['exposed_ms']:10.3f} "
              f"{r['peak_MiB']:9.1f} {r['act_MiB']:8.1f} {r['wrote_MiB']:9.1f} "
              f"{r['read_MiB']:9.1f} {verified:>12}")
    keep, off = rows
    if keep["step_ms"] > 0 and keep["act_MiB"] > 0:
        print(f"offload/keep step time: {off['step_ms'] / keep['step_ms']:.3f}; "
              f"activation peak: {off['act_MiB'] / keep['act_MiB']:.3f} of keep")
    failed = [r["policy"] for r in rows if not r["verified"]]
    if failed:
        print(f"gpu-check: FAILED: the --verify replay of {', '.join(failed)} did not verify",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
