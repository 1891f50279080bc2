"""ssdtrain.offload: saved activations go through the C++ offload engine.

    with ssdtrain.offload(model, dir="/mnt/nvme") as off:
        loss = loss_fn(model(x), y)
        loss.backward()
    print(off.stats())

How it works. Inside the block, ``torch.autograd.graph.saved_tensors_hooks``
routes every tensor autograd saves through a cache keyed by storage (a view and
the tensor it views, or a tensor saved by two ops of one forward, are one
storage: dedup; the rule is ssdtrain/saved.py's, which also numbers the storages
of each forward).
Parameters, the model's inputs and storages under ``min_bytes`` are kept as they
are. Every other storage is written whole to a file of its own by the engine
(io_uring, O_DIRECT, a CRC32C per extent) and released once the write has
landed; backward reads it back into a fresh tensor, checks it, and rebuilds the
saved view (dtype, shape, strides, offset) on it, so the values autograd sees
are bitwise the ones it saved. This module decides when; how a storage's bytes
move (writes, reads, forwarding, CUDA staging, failure messages) is
ssdtrain/transfers.py.

Leaf modules (modules without children) split forward into groups: group g
starts when the g-th leaf module's forward starts. The schedule is a function
of the groups only, so memory is deterministic:
- a storage saved in group g is written at the start of group g + keep_last
  (policy "offload-ssd": keep_last = 0, at once; policy "ssdtrain": keep_last = 2, so
  the storages of the last two leaf modules, which backward needs first, are
  never written: the paper's rule of keeping the last layers);
- its write must have landed by the start of group g + keep_last + write_lag
  (the wait is backpressure, counted as exposed I/O); then it is released;
- when backward unpacks a storage of group g, the reads of groups g-1 .. g-prefetch
  are issued (prefetch: two leaf modules ahead by default);
- a storage still resident when backward needs it (its write not yet released)
  is handed over as is: forwarding, no read.
With ``plan=`` and ``trace=`` (a plan ``ssdtrain plan --trace`` made for a trace
``ssdtrain.capture`` wrote), the plan decides instead (ssdtrain/plan.py): each
storage is matched to the trace's by its save number and checked by what
survives a change of view (bytes, dtype, the module that first saves it;
ssdtrain/saved.py: a run that is not the captured one raises
``ssdtrain.PlanError``);
offload-ssd storages are written when saved (as under "offload-ssd") and released at the
plan's eviction points, mapped to the first save or unpack after each (a plan
without them: they land within ``write_lag`` leaf modules), keep storages stay,
``min_bytes`` and ``prefetch`` do not apply; reads are issued at the plan's
prefetch points, mapped to the last unpack at or before each, or on demand.
Several forwards may run before their backwards (gradient accumulation): each
is a micro-batch of the plan with its own state (``_Forward``), and its
backward applies its own storages' points.
A storage's file is removed when autograd frees the last saved tensor on it.
A storage saved again after its release (a later op saving another view of it,
such as the V of a fused QKV output, or a ``.detach()`` or ``.data`` alias of
it) is the same storage while it is alive (ssdtrain/saved.py), and is read back
from its file, not written twice.

Failures. Any engine error (EIO, ENOSPC, a checksum mismatch, EOF) raises
``ssdtrain.OffloadError`` naming the saved tensor (module, index, dtype, shape)
and the file; the engine then removes all its files. On leaving the block, by
an exception or by Ctrl-C (KeyboardInterrupt) alike, the engine is closed and
its run directory removed; a SIGINT/SIGTERM that kills the process is handled
by the engine's own signal handler, which unlinks the files first.

CUDA tensors are copied to pinned host memory on a stream of their own (which
first waits for the producing stream; the hook then waits for the copy) and
written from there; reads land in pinned memory and are copied back on that
stream, with the consuming stream waiting on it. This path has not run on a
GPU yet. CPU tensors are written and read in place.

Checkpointing. torch.utils.checkpoint's saves reach these hooks where the
checkpoint makes them through autograd: with ``use_reentrant=True`` the
checkpoint's inputs are saved in forward (and offloaded like any storage), and
its recomputation in backward saves what it needs for that block only (kept,
not numbered). With ``use_reentrant=False`` (torch 1.13) the checkpoint's own
saved-tensor hooks replace these inside the block, and its inputs are held by
the checkpoint, not saved: nothing of the block is offloaded.

Thread-safety: one ``offload`` block at a time per thread of forward; unpack may
run on autograd's device threads, so the cache takes a lock.
"""

import os
import threading
import warnings
import weakref

import torch

from . import _engine, ranks
from .forwards import _Forward, _PlanPoints
from .plan import PlanError, StepPlan
from .saved import SaveOrder
from .transfers import _ON_DISK, OffloadError, Transfers, _Handle, _Storage

POLICIES = ("ssdtrain", "offload-ssd", "keep")  # the names `ssdtrain plan` and `replay` use
# The old names, still accepted with a DeprecationWarning.
OLD_POLICIES = {"all": "offload-ssd", "none": "keep"}
# Storages smaller than this stay in memory: a request per tiny tensor costs
# more than the memory it frees (the paper keeps small tensors too).
DEFAULT_MIN_BYTES = 64 << 10
# The paper keeps the last layers resident; two leaf modules is its default.
SSDTRAIN_KEEP_LAST = 2
DEFAULT_WRITE_LAG = 2
# The engine keeps queue_depth bounce blocks of block_size bytes, registered with
# io_uring, and an offload block creates one engine: 16 x 1 MiB (rather than the
# replay's 32 x 4 MiB) keeps that setup cheap enough to pay once per step.
DEFAULT_BLOCK_SIZE = 1 << 20
DEFAULT_QUEUE_DEPTH = 16
DEFAULT_PREFETCH = 2


class Offload(Transfers, _PlanPoints):
    """The object ``offload(...)`` returns; use it as a context manager."""

    def __init__(self, model, dir, policy=None, plan=None, trace=None,
                 min_bytes=DEFAULT_MIN_BYTES, write_lag=DEFAULT_WRITE_LAG,
                 prefetch=DEFAULT_PREFETCH, backend="auto", block_size=DEFAULT_BLOCK_SIZE,
                 queue_depth=DEFAULT_QUEUE_DEPTH, direct_io=True, allow_buffered_io=False,
                 faults=None):
        if plan is not None and policy is not None:
            raise ValueError(f"offload: policy '{policy}' and plan= given: a plan decides "
                             f"what is offloaded; give one of them")
        if plan is None:
            policy = policy or "ssdtrain"
            if policy in OLD_POLICIES:
                warnings.warn(f"offload: policy '{policy}' is now '{OLD_POLICIES[policy]}' (the "
                              f"name ssdtrain plan and replay use); '{policy}' still works",
                              DeprecationWarning, stacklevel=3)
                policy = OLD_POLICIES[policy]
            if policy not in POLICIES:
                raise ValueError(f"offload: policy '{policy}': expected one of "
                                 f"{', '.join(POLICIES)}")
        if (plan is None) != (trace is None):
            raise ValueError("offload: give plan= (a plan file) together with trace= (the "
                             "captured trace it was made for), or neither")
        if not os.path.isdir(dir):
            raise ValueError(f"offload: dir '{dir}' is not a directory")
        if min_bytes < 0 or write_lag < 0 or prefetch < 0:
            raise ValueError("offload: min_bytes, write_lag and prefetch must be >= 0")
        self.model = model
        self.dir = dir
        # A plan decides what is written (ssdtrain/plan.py); writes start when the
        # storage is saved, as under policy "offload-ssd".
        self.plan = StepPlan(plan, trace) if plan is not None else None
        self.policy = "plan" if plan is not None else policy
        self.keep_last = SSDTRAIN_KEEP_LAST if self.policy == "ssdtrain" else 0
        self.min_bytes = min_bytes
        self.write_lag = write_lag
        self.prefetch = prefetch
        self._engine_args = dict(dirs=[os.fspath(dir)], backend=backend, block_size=block_size,
                                 queue_depth=queue_depth, staging_bytes=0, direct_io=direct_io,
                                 allow_buffered_io=allow_buffered_io,
                                 faults=list(faults or []))
        self.engine = None
        self._lock = threading.RLock()
        self._hooks = []
        self._saved_hooks = None
        self._reset_counters()

    # ---- lifetime ---------------------------------------------------------

    def _reset_counters(self):
        # Which saved tensors are one storage, and its save number: the rule
        # capture numbers a trace's storages by (ssdtrain/saved.py). Each entry's
        # payload is its _Storage. Made on entering, from the parameters then.
        self._order = None
        self._current = _Forward(0)  # the forward saves go to
        self._by_group = {}  # group -> [_Storage] offloaded in that group
        self._live = {}  # sid -> _Storage not yet freed
        self._names = {}  # sid -> (name, bytes), for messages
        self._next_sid = 0
        self._group = 0
        self._in_backward = False
        self._failed = None
        self._resident = 0
        self._peak = 0
        self._read_peak = 0  # the most resident at a read in backward (Transfers)
        self._exposed_ns = 0
        self._counts = dict(saved_tensors=0, saved_storages=0, dedup_hits=0,
                            offloaded_storages=0, offloaded_bytes=0, forwarded_storages=0,
                            forwarded_bytes=0, kept_bytes=0, kept_last_bytes=0,
                            prefetched_storages=0, evicted_at_plan_points=0)

    def __enter__(self):
        self.engine = _engine.Engine(**self._engine_args)
        self._order = SaveOrder(self.model)  # the parameters as they are now
        self._hooks.extend(self._order.hooks(self.model))
        for m in self.model.modules():
            if not any(True for _ in m.children()):
                self._hooks.append(m.register_forward_pre_hook(self._next_group))
        self._hooks.append(self.model.register_forward_pre_hook(self._root_pre_hook))
        self._saved_hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._saved_hooks.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        if self._failed is not None and exc is not None and exc is not self._failed:
            # autograd turns an exception in a saved-tensor hook into a
            # RuntimeError; hand the caller the OffloadError itself.
            raise self._failed from exc
        if self._failed is None and isinstance(exc, Exception):
            peer = ranks.peer_failure()  # another rank's offload failed (ssdtrain/ranks.py)
            if peer is not None:
                raise OffloadError(f"ssdtrain.offload: this rank's step failed because {peer}") \
                    from exc
        return False

    def close(self):
        """Removes the hooks, closes the engine and removes every file (idempotent)."""
        if self._saved_hooks is not None:
            self._saved_hooks.__exit__(None, None, None)
            self._saved_hooks = None
        for h in self._hooks:
            h.remove()
        self._hooks = []
        with self._lock:
            if self.engine is not None and not self.engine.closed:
                self._final_stats = self._stats_locked()
            for s in list(self._live.values()):
                self._forget(s)
            self._by_group.clear()
            self._current = _Forward(0)
            if self.engine is not None:
                self.engine.close()

    def run_dirs(self):
        """The engine's private run directories (they vanish when the block ends)."""
        return self.engine.run_dirs()

    # ---- module hooks: groups --------------------------------------------

    def _root_pre_hook(self, module, args):
        with self._lock:
            self._raise_if_failed()  # SaveOrder's own pre-hook, run before, started it
            self._in_backward = False
            previous, self._current = self._current, _Forward(self._order.forwards - 1)
            if self.plan is not None and not previous.in_backward:
                # The points after its last save, up to its forward's end, are behind us.
                self._evict_late(previous, self.plan.forward_end)

    def _next_group(self, module, args):
        """A leaf module's forward starts: the next group."""
        with self._lock:
            self._raise_if_failed()
            if self._in_backward:
                return
            self._group += 1
            g = self._group
            for s in list(self._by_group.get(g - self.keep_last, ())):
                if s.state == "queued":
                    self._start_write(s)
            for s in list(self._by_group.get(g - self.keep_last - self.write_lag, ())):
                if s.state == "writing":
                    self._land_write(s)

    # ---- pack / unpack ----------------------------------------------------

    def _pack(self, t):
        with self._lock:
            self._raise_if_failed()
            self._counts["saved_tensors"] += 1
            # Not numbered (kept as it is): a parameter, buffer or model input, or
            # a save of a checkpointed block's recomputation in backward.
            seen = self._order.see(t)
            if seen is None:
                return t
            entry, new = seen
            if new:
                s = self._new_storage(entry, t)
            else:
                s = entry.payload
                self._counts["dedup_hits"] += 1
            h = _Handle(self, s, t)
            if s.tensor is None:  # on disk already: this handle reads it back too
                h.tensor = None
            s.refs += 1
            s.handles.append(weakref.ref(h))
            return h

    def _new_storage(self, entry, t):
        """The _Storage for a storage saved for the first time, its write queued
        or started when it is to be offloaded."""
        module = entry.module
        placed = None
        if self.plan is not None:
            base = t._base if t._base is not None else t
            try:
                placed = self.plan.check(entry.index, base, module)
            except PlanError as e:  # nothing of this storage is written
                self._failed = e
                raise
            # Its producer has run: so have the eviction points it stands for.
            self._evict(self._current, self.plan.evictions.get(entry.index, ()))
        sid = self._next_sid
        self._next_sid += 1
        nbytes = entry.key[2]
        name = f"{module}:saved{sid} ({str(t.dtype).replace('torch.', '')} {list(t.shape)})"
        s = _Storage(sid, entry, self._current, nbytes, name, self._group, t.device, t)
        entry.payload = s
        self._current.by_index[entry.index] = s
        self._current.saved += 1
        self._live[sid] = s
        self._names[sid] = (name, nbytes)
        self._counts["saved_storages"] += 1
        self._add_resident(nbytes)
        if placed is not None:
            offload = placed.offload
        else:
            offload = self.policy != "keep" and nbytes >= self.min_bytes
        if offload:
            s.state = "queued"
            if placed is None or placed.evict_before is None:  # else the plan's point
                self._by_group.setdefault(s.group, []).append(s)
            if self.keep_last == 0:
                self._start_write(s)
        else:
            self._counts["kept_bytes"] += nbytes
        return s

    def _unpack(self, h):
        if not isinstance(h, _Handle):
            return h
        with self._lock:
            self._raise_if_failed()
            self._in_backward = True
            self._order.start_backward()
            s = h.storage
            if self.plan is not None:
                self._apply_plan_at_unpack(s)
            if h.tensor is not None:
                if s.state in ("queued", "writing"):
                    self._forward(s)
                return h.tensor
            if self.plan is None:
                for g in range(s.group, s.group - self.prefetch - 1, -1):
                    for p in list(self._by_group.get(g, ())):
                        if p.state == "written":
                            self._start_read(p)
                            self._counts["prefetched_storages"] += p is not s
            if s.state == "written":  # no prefetch point before it: on demand
                self._start_read(s)
            if s.state == "reading":
                self._land_read(s)
            return self._view(s, h)

    def _drop(self, s):
        with self._lock:
            s.refs -= 1
            if s.refs == 0 and s.state != "freed":
                try:
                    self._forget(s)
                except OffloadError as e:  # raised again by the next hook
                    self._failed = self._failed or e

    # ---- statistics -------------------------------------------------------

    def _stats_locked(self):
        e = self.engine.stats()
        out = dict(self._counts)
        out.update(ssd_bytes_written=e["bytes_written"], ssd_bytes_read=e["bytes_read"],
                   peak_saved_bytes=self._peak, peak_saved_bytes_at_reads=self._read_peak,
                   saved_bytes_now=self._resident,
                   exposed_io_ns=self._exposed_ns, files_live=sum(
                       1 for s in self._live.values()
                       if s.state in _ON_DISK),
                   backend=self.engine.backend_name(), direct_io=self.engine.direct_io(),
                   faults_injected=self.engine.faults_injected())
        return out

    def stats(self):
        """Counters, with the run report's names: ssd_bytes_written, ssd_bytes_read,
        peak_saved_bytes (resident saved-tensor bytes this cache held at most),
        peak_saved_bytes_at_reads (the most of them right after a read in
        backward: the part of the peak backward's reads make; 0 without reads),
        exposed_io_ns (time forward and backward waited on the SSD path);
        evicted_at_plan_points: storages released at a plan's eviction point."""
        with self._lock:
            if self.engine is None or self.engine.closed:
                return dict(getattr(self, "_final_stats", {}))
            return self._stats_locked()


def offload(model, dir, policy=None, plan=None, trace=None, **options):
    """Offloads the activations autograd saves inside the ``with`` block to files in
    ``dir``, by `policy` ("ssdtrain" by default, "offload-ssd" or "keep"; the old
    "all" and "none" still work, with a DeprecationWarning) or by `plan` (a
    plan file made for the captured trace `trace`). See the module docstring for
    the schedule and ``Offload`` for options."""
    return Offload(model, dir, policy=policy, plan=plan, trace=trace, **options)
