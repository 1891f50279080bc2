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

What survives a change of view. A storage is matched between a capture and a
run by what does not depend on the tensor object autograd is handed (capture
sees the tensors below autograd, a run the ones above it, so one may be
``[4, 4, 128, 64]`` where the other is ``[16, 128, 64]`` on the same bytes): its
save number, its bytes, its dtype and the module that first saves it (the
innermost module whose forward is running then; ``<model>`` outside any). The
module stack is kept here too, by forward pre- and post-hooks on every module,
so that both sides name modules alike.

Recomputation. Saves made once backward has begun (``start_backward``) until
the next forward are not numbered: they are the saves of a checkpointed
block's recomputation (torch.utils.checkpoint with ``use_reentrant=True``
recomputes through autograd inside backward), which live only until that
block's gradient is done.

In a trace, the root row of the storage numbered k, first saved in module M, is
named ``M.t<row>:saved<k>`` (``saved_name``, ``saved_index``, ``saved_module``).
"""

import re

import torch
from torch.multiprocessing.reductions import StorageWeakRef

_SAVED_SUFFIX = re.compile(r":saved(\d+)$")
_SAVED_NAME = re.compile(r"^(.*)\.t\d+:saved\d+$")
MODEL = "<model>"  # the module name of code outside every submodule


def storage_key(t):
    """(device, storage address, storage bytes): one storage while it is alive."""
    s = t.storage()
    return (t.device, s.data_ptr(), s.nbytes())


def saved_name(module, row, index):
    """The trace name of the root row `row` of the storage numbered `index`,
    first saved in `module`."""
    return f"{module}.t{row}:saved{index}"


def saved_module(name):
    """The module a numbered storage's trace name says first saved it, or None."""
    m = _SAVED_NAME.match(name or "")
    return m.group(1) if m else None


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

    __slots__ = ("index", "key", "forward", "module", "storage", "payload")

    def __init__(self, index, key, forward, module, t):
        self.index = index
        self.key = key
        self.forward = forward  # the forward (SaveOrder.forwards) that numbered it
        self.module = module  # the innermost module running when it was first saved
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
        self.backward = False  # backward has begun since the last forward started
        self.stack = []  # names of the modules whose forward is running, innermost last

    def hooks(self, model):
        """Registers the forward pre-hook that starts a forward and the hooks that
        keep the module stack; returns their handles."""
        handles = [model.register_forward_pre_hook(lambda module, args: self.start_forward(args))]
        for name, m in model.named_modules():
            handles.append(m.register_forward_pre_hook(
                lambda module, args, name=name: self.stack.append(name or MODEL)))
            handles.append(m.register_forward_hook(lambda module, args, out: self._pop()))
        return handles

    def _pop(self):
        if self.stack:
            self.stack.pop()

    def module(self):
        """The innermost module whose forward is running (MODEL outside all)."""
        return self.stack[-1] if self.stack else MODEL

    def start_forward(self, args):
        """A forward of the model with positional arguments `args` begins."""
        self._inputs = {storage_key(t) for t in _tensors_in(args, [])}
        self.count = 0
        self.forwards += 1
        self.backward = False
        self.stack = []  # a forward that raised may have left names behind

    def start_backward(self):
        """Backward has begun: saves from now to the next forward are recomputation's."""
        self.backward = True

    def see(self, t):
        """The saved tensor t's (entry, new), or None when t is not numbered."""
        if t.layout != torch.strided or self.backward:
            return None
        key = storage_key(t)
        if key[2] == 0 or key in self._persistent or key in self._inputs:
            return None
        entry = self._entries.get((self.forwards, key))
        if entry is not None and entry.storage.expired():
            entry = None  # freed, and the address now holds another storage
        if entry is not None:
            return entry, False
        entry = SavedEntry(self.count, key, self.forwards, self.module(), t)
        self.count += 1
        self._entries[(self.forwards, key)] = entry
        return entry, True

    def forget(self, entry):
        """Autograd freed every saved tensor on entry's storage."""
        if self._entries.get((entry.forward, entry.key)) is entry:
            del self._entries[(entry.forward, entry.key)]
