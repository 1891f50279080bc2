"""A plan for a captured trace, applied to a run: ``offload(model, dir,
plan="plan.json", trace="captured.json")``.

Which storage is which. ``ssdtrain.capture`` names the root row of every saved
storage with its save number and the module that first saved it
(ssdtrain/saved.py); a run numbers its saved storages with the same code, so
the k-th storage a run saves is the trace's storage numbered k. Each is checked
as it is saved, by what survives a change of view: its bytes, its dtype and
the module that first saves it must be the trace's (not its shape: capture sees
the tensors below autograd, a run those above, and the two may view one storage
differently, ``[16, 128, 64]`` against ``[4, 4, 128, 64]``), and a run must
save exactly as many storages as the trace; the first difference raises
``PlanError`` naming the storage (save number, module, what the trace has and
what the run has) before anything of it is written. The plan itself is checked
against the trace by the C++ reader (``traces::ValidatePlan``: model, trace
fingerprint, placements) and resolved per storage by ``traces::ResolvePlan``,
the one meaning of a plan.

What is applied. offload-ssd: the storage is written through the engine when
autograd saves it (its producer has run), released at its eviction point (below;
a plan without one: once the write lands, within ``write_lag`` leaf modules),
and read back in backward. keep: it stays in memory. recompute and offload-host
raise ``PlanError`` when the plan is loaded: the Python offload neither
recomputes nor has a host tier (``ssdtrain replay`` runs such plans). The
plan's file names, SSD directory indexes and offsets are the replay's layout;
here the engine keeps one file per storage in its run directory.

Prefetch points. A plan issues a storage's read when backward op
``prefetch_before`` starts; a run sees no ops, only the unpacks of saved
storages. Capture writes an op where autograd unpacks each saved tensor
(``<module>.unpack``), so a storage's first backward use in the trace is its
first unpack. An op maps to the last unpack at or before it: the read of S is
issued at the first unpack of any storage whose first backward use is the
latest one at or before S's prefetch op (before every one: backward's first
unpack), so it goes out no later than the plan says, give or take the ops
between two unpacks (none, or no prefetch point: on demand, when S itself is
unpacked). Not the first unpack after it: a planner puts the point a few ops
before S's own unpack, often after the unpack before it, and that would be S's
own, a read on demand.

Memory. ``peaks()`` walks these rules over the trace: the resident saved bytes
a run of the plan holds at most, which ``offload`` measures the same way
(``peak_saved_bytes``, ``peak_saved_bytes_at_reads``).

Eviction points. A plan frees a storage's memory when op ``evict_before`` (in
forward or in backward) is issued, waiting for its write to land if it has not
(the wait is exposed I/O): memory follows from the plan, whatever the SSD's
speed, as in ``ssdtrain replay``. A run sees no ops, only saves and unpacks,
and is released at the first of them that shows it has reached op E. In
forward: the first save of a storage the trace's op E or a later one produced
(before that storage counts as resident). Past forward's last save (E late in
forward, or in backward): the first unpack of a storage whose first backward
use is at or after E, which comes no later than the storage's own (ValidatePlan
puts E before its prefetch point and first backward use), or, for E in forward,
the start of the next forward if that comes first; give or take the ops between
two saves or unpacks again.

Micro-batches. A run may make several forwards before their backwards
(gradient accumulation); each is one micro-batch of the plan, numbered from 0
by ssdtrain/saved.py, and offload keeps each one's storages, unpacks and
applied points apart, so each backward applies its own forward's points and
checks its own count.
"""

import bisect
import collections
import os

from . import _engine
from .capture import _dtype_name
from .saved import saved_index, saved_module

PlanError = _engine.PlanError
# StepPlan.peaks(): the resident saved bytes at most after forward's last save
# (forward), right after a read in backward (at_reads; 0: backward reads nothing)
# and over the whole forward and backward (step): offload's peak_saved_bytes
# after forward, its peak_saved_bytes_at_reads and peak_saved_bytes at the end.
Peaks = collections.namedtuple("Peaks", "forward at_reads step")

_UNSUPPORTED = {
    "recompute": "recompute plans are not supported by the Python offload (it does not "
                 "recompute); plan with --policy offload-ssd or ssdtrain, or run this plan "
                 "with `ssdtrain replay`",
    "offload-host": "offload-host placements are not supported by the Python offload (it "
                    "offloads to SSD only); plan with --policy offload-ssd or ssdtrain, or run "
                    "this plan with `ssdtrain replay`",
}


class PlacedStorage:
    """One numbered storage of the trace and what the plan does with it."""

    __slots__ = ("index", "root", "name", "module", "bytes", "dtype", "shape", "offload",
                 "producer", "first_backward_use", "last_use", "prefetch_before",
                 "evict_before")

    def __init__(self, index, row):
        self.index = index
        self.root = row["root"]
        self.name = row["name"]
        self.module = saved_module(row["name"])
        self.bytes = row["bytes"]
        self.dtype = row["dtype"]
        self.shape = list(row["shape"])
        self.offload = row["action"] == "offload-ssd"
        self.producer = row["producer"]
        self.first_backward_use = row["first_backward_use"]
        self.last_use = row["last_use"]
        self.prefetch_before = row["prefetch_before"] if self.offload else None
        self.evict_before = row["evict_before"] if self.offload else None


class StepPlan:
    """A plan resolved against its captured trace, by save number. Immutable."""

    def __init__(self, plan, trace):
        self.plan_path = os.fspath(plan)
        self.trace_path = os.fspath(trace)
        resolved = _engine.resolve_plan(self.trace_path, self.plan_path)
        self.policy = resolved["policy"]
        self.fingerprint = resolved["trace_fingerprint"]
        self.ssd_bytes = resolved["ssd_bytes"]  # unique offload-ssd bytes of one forward
        # The op a run has reached once a later forward starts: forward's last.
        start = resolved["backward_start"]
        self.forward_end = None if start is None else start - 1
        where = f"{self.plan_path} (trace {self.trace_path})"
        by_index = {}
        for row in resolved["storages"]:
            if row["action"] in _UNSUPPORTED:
                raise PlanError(f"{where}: placement on tensor {row['placed_by']} "
                                f"({row['name']}) is {row['action']}: "
                                f"{_UNSUPPORTED[row['action']]}")
            k = saved_index(row["name"])
            if k is None:
                if row["action"] == "offload-ssd":
                    raise PlanError(f"{where}: tensor {row['root']} ({row['name']}) is "
                                    f"offloaded but has no save number: the trace was not "
                                    f"made by ssdtrain.capture")
                continue  # parameters, buffers and the model's inputs
            if k in by_index:
                raise PlanError(f"{where}: save number {k} names both tensor "
                                f"{by_index[k].root} and tensor {row['root']}")
            by_index[k] = PlacedStorage(k, row)
        if not by_index:
            raise PlanError(f"{where}: the trace has no numbered saved storages (tensor names "
                            f"ending in ':saved<k>'): it was not made by ssdtrain.capture")
        if sorted(by_index) != list(range(len(by_index))):
            missing = min(set(range(len(by_index))) - set(by_index))
            raise PlanError(f"{where}: the trace's save numbers skip {missing}")
        self.storages = [by_index[k] for k in range(len(by_index))]
        self.triggers = self._triggers()
        self.evictions, self.late_evictions = self._evictions()

    def _triggers(self):
        """Save number -> the save numbers whose reads its first unpack issues."""
        first_use = {}  # backward op -> save numbers first used there
        for s in self.storages:
            if s.first_backward_use is not None:
                first_use.setdefault(s.first_backward_use, []).append(s.index)
        ops = sorted(first_use)
        triggers = {}
        for s in self.storages:
            if s.prefetch_before is None:
                continue
            i = max(bisect.bisect_right(ops, s.prefetch_before) - 1, 0)
            for t in first_use[ops[i]] if ops else ():
                if t != s.index:
                    triggers.setdefault(t, []).append(s.index)
        return triggers

    def _evictions(self):
        """(save number -> the save numbers released when it is saved, and the
        (eviction op, save number) pairs no save reaches, in op order: released
        at unpacks), for the storages with an eviction point; the others follow
        write_lag."""
        evictions, late = {}, []
        # The latest producer among the first k + 1 saves: the first save whose
        # producer is at or after op E is the first k where this reaches E.
        latest, top = [], -1
        for k in self.storages:
            top = max(top, -1 if k.producer is None else k.producer)
            latest.append(top)
        for s in self.storages:
            if s.evict_before is None:
                continue
            at = bisect.bisect_left(latest, s.evict_before)
            if at == len(latest):  # after the last save: the end of forward, or backward
                late.append((s.evict_before, s.index))
            elif at <= s.index:  # ValidatePlan puts the point after the storage's forward uses
                raise PlanError(f"{self.plan_path} (trace {self.trace_path}): the eviction "
                                f"point of tensor {s.root} ({s.name}), op {s.evict_before}, "
                                f"falls before the storage is saved")
            else:
                evictions.setdefault(at, []).append(s.index)
        return evictions, sorted(late)

    def peaks(self):
        """The resident saved bytes a run of this plan holds at most (``Peaks``),
        by offload's own rules (the points above) walked over the trace.
        Forward, in save order: the storages whose eviction points a save stands
        for released, then that storage counted. Backward, in op order: at a
        storage's first backward use (capture's unpack op, where autograd
        unpacks it), the late eviction points up to that op released, the reads
        mapped to it (``triggers``) counted, then its own read if it is on disk;
        at its last use it is freed (autograd frees what a node saved when the
        node ends, before the next node unpacks anything); a storage no backward
        op uses stays. None when some offloaded storage has no eviction point (it
        follows write_lag, which depends on the module order, not on the plan).
        One forward and its backward at a time."""
        if any(s.offload and s.evict_before is None for s in self.storages):
            return None
        state = {}  # save number -> "resident" | "released" | "freed"
        now = dict(resident=0, peak=0, at_reads=0)

        def add(k, read):
            state[k] = "resident"
            now["resident"] += self.storages[k].bytes
            now["peak"] = max(now["peak"], now["resident"])
            if read:
                now["at_reads"] = max(now["at_reads"], now["resident"])

        def release(ks, to="released"):
            for k in ks:
                if state.get(k) == "resident" and (self.storages[k].offload or to == "freed"):
                    state[k] = to
                    now["resident"] -= self.storages[k].bytes

        for s in self.storages:
            release(self.evictions.get(s.index, ()))
            add(s.index, False)
        forward = now["peak"]
        used = [s for s in self.storages if s.first_backward_use is not None]
        events = sorted([(s.first_backward_use, 0, s.index) for s in used] +
                        [(s.last_use, 1, s.index) for s in used])
        late_done = 0
        for op, free, k in events:
            if free:
                release((k,), "freed")
                continue
            due, late_done = self.late_evictions_due(late_done, op)
            release(due)
            for p in list(self.triggers.get(k, ())) + [k]:
                if state[p] == "released":
                    add(p, True)
        return Peaks(forward, now["at_reads"], now["peak"])

    def late_evictions_due(self, done, reached):
        """The late evictions a run owes once it has reached op `reached` (None:
        none), from the `done`-th on (a forward's first `done` were applied
        already): (their save numbers, the new `done`)."""
        if reached is None:
            return [], done
        end = bisect.bisect_right(self.late_evictions, (reached, len(self.storages)), lo=done)
        return [k for _, k in self.late_evictions[done:end]], end

    def _mismatch(self, what):
        return PlanError(f"ssdtrain.offload: this run does not match the trace the plan "
                         f"{self.plan_path} was made for ({self.trace_path}): {what}; the "
                         f"model or its inputs differ from the captured ones (capture and "
                         f"plan again)")

    def check(self, index, base, module):
        """The placement of the run's storage numbered `index`, whose base tensor is
        `base`, first saved in `module`; raises PlanError when it is not the
        trace's storage of that number. What is compared survives a change of
        view (ssdtrain/saved.py): bytes, dtype and module, not the shape."""
        nbytes = base.storage().nbytes()
        if index >= len(self.storages):
            raise self._mismatch(
                f"saved storage {index} (in {module}: {nbytes} bytes "
                f"{str(base.dtype).replace('torch.', '')}) is one more than the "
                f"{len(self.storages)} the trace has")
        s = self.storages[index]
        try:
            dtype = _dtype_name(base.dtype, f"saved storage {index}")
        except ValueError as e:
            raise self._mismatch(str(e)) from e
        if (nbytes, dtype, module) != (s.bytes, s.dtype, s.module):
            raise self._mismatch(
                f"saved storage {index} is {nbytes} bytes {dtype} first saved in {module}, "
                f"but the trace's storage {index} ({s.name}) is {s.bytes} bytes {s.dtype} "
                f"first saved in {s.module}")
        return s

    def check_count(self, count, forward):
        """Raises PlanError unless a forward (the `forward`-th of its offload
        block, from 0) that saved `count` storages is the trace's."""
        if count != len(self.storages):
            raise self._mismatch(f"the forward saved {count} storages, the trace "
                                 f"{len(self.storages)} (forward {forward} of the offload "
                                 f"block, its backward starting)")
