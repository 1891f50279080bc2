"""Save numbers: which storages autograd saves in one forward, numbered in the
order it saves them. ``capture`` writes each number into its trace, and
``offload(plan=...)`` numbers the storages of a run the same way to find each
one's placement, so both use this one class.

The rule. The forward pre-hook on the model starts a forward: numbering restarts
at 0 and the model's tensor arguments become its inputs. Each tensor autograd
saves from then on (``saved_tensors_hooks``' pack, including the loss after the
model returns) gets the number of its storage; a storage saved for the first
time in this forward gets the next number. Each forward numbers its own
storages: one an earlier forward saved too (a targets tensor shared by two
micro-batches) is numbered again, as a capture of this forward alone would.
Not numbered: sparse tensors, empty storages, and the storages of the model's
parameters, buffers and inputs (resident anyway). Two saved tensors are one storage when they share its address, byte count and
device while it is alive. Each entry holds a weak reference to its storage
(torch's ``StorageWeakRef``): once the storage has been freed (offload wrote it
and dropped its memory, and autograd and the model dropped theirs) the
allocator may hand its address to another, which gets a new number; while it
is alive, every tensor on it is that storage, whichever tensor object it views
(a ``.detach()`` or ``.data`` alias of the first one included), as in
``capture``, which holds every storage to the end.

In a trace, the root row of the storage numbered k is named ``<name>:saved<k>``
(``saved_name`` and ``saved_index``).
"""

import re

import torch
from torch.multiprocessing.reductions import StorageWeakRef

_SAVED_SUFFIX = re.compile(r":saved(\d+)$")


def storage_key(t):
    """(device, storage address, storage bytes): one storage while it is alive."""
    s = t.storage()
    return (t.device, s.data_ptr(), s.nbytes())


def saved_name(name, index):
    """The trace name of the root row of the storage numbered `index`."""
    return f"{name}:saved{index}"


def saved_index(name):
    """The save number in a trace row's name, or None."""
    m = _SAVED_SUFFIX.search(name or "")
    return int(m.group(1)) if m else None


def _tensors_in(value, out):
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for x in value:
            _tensors_in(x, out)
    elif isinstance(value, dict):
        for x in value.values():
            _tensors_in(x, out)
    return out


class SavedEntry:
    """A numbered storage. `payload` belongs to the caller (offload keeps its
    cache record there)."""

    __slots__ = ("index", "key", "forward", "storage", "payload")

    def __init__(self, index, key, forward, t):
        self.index = index
        self.key = key
        self.forward = forward  # the forward (SaveOrder.forwards) that numbered it
        self.storage = StorageWeakRef(t.storage())  # expired once the storage is freed
        self.payload = None


class SaveOrder:
    """Numbers saved storages as the module docstring says. Not thread-safe:
    callers hold their own lock around `see` and `forget` (pack runs on the
    forward's thread)."""

    def __init__(self, model):
        state = list(model.parameters()) + list(model.buffers())
        self._persistent = {storage_key(t) for t in state}
        self._inputs = set()
        self._entries = {}  # (forward, storage key) -> SavedEntry, until forgotten
        self.count = 0  # numbers handed out in the current forward
        self.forwards = 0  # forwards started

    def hook(self, model):
        """Registers the forward pre-hook that starts a forward; returns its handle."""
        return model.register_forward_pre_hook(lambda module, args: self.start_forward(args))

    def start_forward(self, args):
        """A forward of the model with positional arguments `args` begins."""
        self._inputs = {storage_key(t) for t in _tensors_in(args, [])}
        self.count = 0
        self.forwards += 1

    def see(self, t):
        """The saved tensor t's (entry, new), or None when t is not numbered."""
        if t.layout != torch.strided:
            return None
        key = storage_key(t)
        if key[2] == 0 or key in self._persistent or key in self._inputs:
            return None
        entry = self._entries.get((self.forwards, key))
        if entry is not None and entry.storage.expired():
            entry = None  # freed, and the address now holds another storage
        if entry is not None:
            return entry, False
        entry = SavedEntry(self.count, key, self.forwards, t)
        self.count += 1
        self._entries[(self.forwards, key)] = entry
        return entry, True

    def forget(self, entry):
        """Autograd freed every saved tensor on entry's storage."""
        if self._entries.get((entry.forward, entry.key)) is entry:
            del self._entries[(entry.forward, entry.key)]
