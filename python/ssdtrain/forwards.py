"""ssdtrain.forwards: the forwards an offload block has seen and what a plan
still owes each (ssdtrain/offload.py's hooks call these).

Several forwards may run before their backwards (gradient accumulation): each
is a micro-batch of the plan with its own state (``_Forward``), and its
backward applies its own storages' points: at the first unpack of a storage,
the plan's eviction points at or before its first backward use (those after
forward's last save) and the prefetch points mapped to it (ssdtrain/plan.py).
"""

from .plan import PlanError


class _Forward:
    """One forward of the model (a micro-batch) and what its plan still owes it:
    forwards may run several before their backwards (gradient accumulation), so
    each backward applies its own forward's points."""

    __slots__ = ("number", "by_index", "saved", "unpacked", "late_done", "in_backward")

    def __init__(self, number):
        self.number = number  # the forwards of this offload block before it
        self.by_index = {}  # save number -> _Storage, until freed
        self.saved = 0  # storages numbered
        self.unpacked = set()  # save numbers unpacked in its backward
        self.late_done = 0  # the plan's late evictions applied (StepPlan.late_evictions)
        self.in_backward = False  # its backward has started (and its count was checked)


class _PlanPoints:
    """The plan's points, applied by an ``Offload`` (its plan, lock, counters and
    transfers are the instance's)."""

    def _apply_plan_at_unpack(self, s):
        """At the first unpack of s's forward, its count is checked; at the first
        unpack of s, the plan's points it stands for are applied: the eviction
        points at or before its first backward use (those after forward's last
        save), then the prefetch points mapped to it."""
        fwd, index = s.forward, s.entry.index
        if not fwd.in_backward:
            fwd.in_backward = True
            try:
                self.plan.check_count(fwd.saved, fwd.number)
            except PlanError as e:
                self._failed = e
                raise
        if index in fwd.unpacked:
            return
        fwd.unpacked.add(index)
        self._evict_late(fwd, self.plan.storages[index].first_backward_use)
        for k in self.plan.triggers.get(index, ()):
            p = fwd.by_index.get(k)
            if p is not None and p.state == "written":
                self._start_read(p)
                self._counts["prefetched_storages"] += 1

    def _evict(self, fwd, save_numbers):
        """The plan's eviction point of these storages of forward `fwd`: each
        still in memory is released, its write waited for first."""
        for k in save_numbers:
            s = fwd.by_index.get(k)
            if s is not None and s.state == "writing":
                self._land_write(s)
                self._counts["evicted_at_plan_points"] += 1

    def _evict_late(self, fwd, reached):
        """The eviction points after forward `fwd`'s last save, up to op `reached`."""
        due, fwd.late_done = self.plan.late_evictions_due(fwd.late_done, reached)
        self._evict(fwd, due)
