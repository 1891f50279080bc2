"""How one saved storage's bytes move between memory and its file, for
``ssdtrain.offload`` (ssdtrain/offload.py decides when; this module how): the
record of a deduplicated storage (``_Storage``) and of each saved tensor on it
(``_Handle``), and ``Transfers``, the writes, reads, releases, forwarding and
removal of a storage through the C++ engine, the CUDA staging through pinned
memory, the resident-bytes count and the failure messages.

States of a storage: kept | queued | writing | forwarding | written | reading |
read | freed; ``_ON_DISK`` are those with a file (or a write in flight).
"""

import re
import time

import torch

from . import _engine, ranks

OffloadError = _engine.OffloadError


# How the engine names a tensor in a message: "writing tensor 6 to /d/t6.bin",
# "checksum mismatch reading tensor 3 from /d/t3.bin".
_ENGINE_TENSOR = re.compile(r"(writing|reading) tensor (\d+) (?:to|from) (\S+)")

# States whose storage has a file (or a write in flight).
_ON_DISK = ("writing", "forwarding", "written", "reading", "read")


class _Storage:
    """One deduplicated storage and where its bytes are."""

    __slots__ = ("sid", "entry", "forward", "nbytes", "name", "group", "device", "tensor",
                 "state", "ticket", "buffer", "refs", "file", "handles", "pinned", "event")

    def __init__(self, sid, entry, forward, nbytes, name, group, device, tensor):
        self.sid = sid
        self.entry = entry  # its saved.SavedEntry (save number, storage key)
        self.forward = forward  # the _Forward that saved it
        self.nbytes = nbytes
        self.name = name
        self.group = group
        self.device = device
        self.tensor = tensor  # the first saved tensor on it, while resident
        # kept | queued | writing | forwarding | written | reading | read | freed
        self.state = "kept"
        self.ticket = None
        self.buffer = None  # bytes read back (uint8, nbytes), or the pinned copy
        self.refs = 0  # live pack handles
        self.file = ""
        self.handles = []  # weak references to the handles, to drop their tensors
        self.pinned = None
        self.event = None


class _Handle:
    """What autograd keeps in place of a saved tensor."""

    __slots__ = ("cache", "storage", "tensor", "dtype", "size", "stride", "offset",
                 "__weakref__")

    def __init__(self, cache, storage, tensor):
        self.cache = cache
        self.storage = storage
        self.tensor = tensor  # the saved tensor itself while the storage is resident
        self.dtype = tensor.dtype
        self.size = tuple(tensor.size())
        self.stride = tuple(tensor.stride())
        self.offset = tensor.storage_offset()

    def __del__(self):
        try:
            self.cache._drop(self.storage)
        except Exception:  # interpreter shutdown: the cache may be gone already
            pass


def _storage_of(t):
    s = t.storage()
    return s.data_ptr(), s.nbytes()




class Transfers:
    """The mixin ``Offload`` moves storages with. It uses the engine (``engine``),
    the counters (``_counts``, ``_exposed_ns``, ``_resident``, ``_peak``,
    ``_read_peak``; ``_in_backward``), the
    names for messages (``_names``), the sticky failure (``_failed``), the live
    storages (``_live``, ``_by_group``) and the save order (``_order``) of the
    ``Offload`` it is part of; callers hold its lock."""

    # ---- writes and reads -------------------------------------------------

    def _start_write(self, s):
        try:
            if s.device.type == "cuda":
                self._stage_to_host(s)
                src = s.pinned
            else:
                src = s.tensor
            s.ticket = self.engine.write_async(s.sid, _storage_of(src)[0], s.nbytes)
        except OffloadError as e:
            self._fail(s, "writing", e)
        s.state = "writing"
        try:
            s.file = self.engine.file_path(s.sid)
        except OffloadError:
            pass  # the engine failed since: the wait on this write reports why

    def _land_write(self, s):
        t0 = time.perf_counter_ns()
        try:
            self.engine.wait(s.ticket)
        except OffloadError as e:
            self._fail(s, "writing", e)
        finally:
            self._exposed_ns += time.perf_counter_ns() - t0
        s.ticket = None
        s.state = "written"
        s.pinned = None
        self._release(s)
        self._counts["offloaded_storages"] += 1
        self._counts["offloaded_bytes"] += s.nbytes

    def _release(self, s):
        """Drops every reference this cache holds to the storage's memory."""
        s.tensor = None
        for ref in s.handles:
            h = ref()
            if h is not None:
                h.tensor = None
        self._add_resident(-s.nbytes)

    def _start_read(self, s):
        pin = s.device.type == "cuda"
        s.buffer = torch.empty(s.nbytes, dtype=torch.uint8, pin_memory=pin)
        self._add_resident(s.nbytes)
        try:
            s.ticket = self.engine.read_async(s.sid, s.buffer.data_ptr(), s.nbytes)
        except OffloadError as e:
            self._fail(s, "reading", e)
        s.state = "reading"

    def _land_read(self, s):
        t0 = time.perf_counter_ns()
        try:
            self.engine.wait(s.ticket)
        except OffloadError as e:
            s.buffer = None  # never hand back bytes that were not checked
            self._fail(s, "reading", e)
        finally:
            self._exposed_ns += time.perf_counter_ns() - t0
        s.ticket = None
        s.state = "read"

    def _forward(self, s):
        """Backward needs s before its write was released: hand over the resident
        tensor and skip the read (a write in flight is left to finish; its file goes
        with the storage)."""
        if s.state == "writing":
            s.state = "forwarding"
            self._counts["forwarded_storages"] += 1
            self._counts["forwarded_bytes"] += s.nbytes
        else:  # queued: one of the last keep_last leaf modules', never written
            s.state = "kept"
            self._counts["kept_last_bytes"] += s.nbytes

    def _forget(self, s):
        """The last saved tensor on s is gone: free its memory and its file."""
        if s.ticket is not None:
            try:
                self.engine.wait(s.ticket)
            except OffloadError:
                pass  # the engine has failed; nothing of s is used any more
            s.ticket = None
        if s.state != "written":  # every other state holds the bytes in memory
            self._add_resident(-s.nbytes)
        if s.state in _ON_DISK and not self.engine.closed:
            try:
                self.engine.remove(s.sid)
            except OffloadError:
                pass  # after a failure the engine has removed every file already
        s.tensor = None
        s.buffer = None
        s.pinned = None
        s.state = "freed"
        self._order.forget(s.entry)
        if s.forward.by_index.get(s.entry.index) is s:
            del s.forward.by_index[s.entry.index]
        self._live.pop(s.sid, None)
        group = self._by_group.get(s.group)
        if group is not None and s in group:
            group.remove(s)
            if not group:
                del self._by_group[s.group]

    def _view(self, s, h):
        if s.device.type == "cuda":
            if s.tensor is None:
                stream = self._copy_stream(s.device)
                with torch.cuda.stream(stream):
                    s.tensor = s.buffer.to(s.device, non_blocking=True)
                torch.cuda.current_stream(s.device).wait_stream(stream)
                s.tensor.record_stream(torch.cuda.current_stream(s.device))
            base = s.tensor
        else:
            base = s.buffer
        return base.view(h.dtype).as_strided(h.size, h.stride, h.offset)

    # ---- CUDA staging -----------------------------------------------------

    def _copy_stream(self, device):
        streams = self.__dict__.setdefault("_streams", {})
        if device not in streams:
            streams[device] = torch.cuda.Stream(device)
        return streams[device]

    def _stage_to_host(self, s):
        stream = self._copy_stream(s.device)
        stream.wait_stream(torch.cuda.current_stream(s.device))
        s.pinned = torch.empty(s.nbytes, dtype=torch.uint8, pin_memory=True)
        src = s.tensor
        flat = torch.empty(0, dtype=src.dtype, device=s.device).set_(src.storage())
        flat = flat.view(torch.uint8)
        with torch.cuda.stream(stream):
            s.pinned.copy_(flat, non_blocking=True)
            s.event = torch.cuda.Event()
            s.event.record(stream)
        s.event.synchronize()

    # ---- failures ---------------------------------------------------------

    def _fail(self, s, what, e):
        """Raises OffloadError naming the saved tensor and file the engine failed on:
        the engine's message names them by id (the failure is sticky, so a later
        wait may report an earlier tensor's failure)."""
        culprit = _ENGINE_TENSOR.findall(str(e))
        if culprit:
            verb, sid, path = culprit[-1]
            name, nbytes = self._names.get(int(sid), (f"t{sid}", 0))
            what, sid = verb, int(sid)
        else:
            name, nbytes, sid, path = s.name, s.nbytes, s.sid, s.file or "not created"
        err = OffloadError(f"ssdtrain.offload: {what} saved tensor {name} (storage {sid}, "
                           f"{nbytes} bytes, file {path}) failed: {e}")
        self._failed = err
        ranks.publish(str(err))
        raise err from e

    def _raise_if_failed(self):
        if self._failed is not None:
            raise self._failed

    def _add_resident(self, delta):
        self._resident += delta
        self._peak = max(self._peak, self._resident)
        if delta > 0 and self._in_backward:  # a read
            self._read_peak = max(self._read_peak, self._resident)
