"""ssdtrain.capture: a real forward and backward, written as an ssdtrain trace.

    trace = ssdtrain.capture(model, (idx,), loss_fn=lambda out: f(out, y),
                             path="captured.json")

Every aten op the step runs (seen through a TorchDispatchMode, below autograd,
so backward's ops are seen too) becomes an op row, in execution order, with its
FLOPs (2·m·n·k per gemm, one per output element otherwise) and bytes. Every
tensor an op makes becomes a tensor row with its real dtype, shape and bytes; a
tensor on a storage already seen (a view: view, transpose, split, expand, ...)
becomes a row with ``alias_of`` its storage's first row and no bytes of its own.
Tensors autograd saves in forward (seen through saved-tensor hooks) are marked
``saved_for_backward``, and the root row of each storage they are on is named
``<module>.t<row>:saved<k>`` with its save number k and the module that first
saves it (ssdtrain/saved.py: the order in which autograd first saves each
storage, apart from parameters and inputs), which ``offload(plan=...)`` uses to
find a run's storages in the trace.
Checkpointing (torch.utils.checkpoint): the forward of a checkpointed block
saves what the checkpoint saves (reentrant: its inputs; not reentrant: nothing,
the checkpoint's own hooks replace these); its recomputation in backward is
traced as ops named ``<module>.recompute.<op>``, in phase backward, whose
tensors are of kind workspace and whose saves live within backward. Autocast
and bf16 models need nothing: capture under the same ``torch.autocast`` as
training, and each tensor row has the dtype the op produced.
Module names come from forward hooks on every module: an op's name is its
module's qualified name and the aten op, and its layer is the first integer in
that name (``blocks.3.fc1`` -> 3; -1 outside numbered modules, and 0 everywhere
for a model without numbered modules, e.g. one block). A backward op takes the
module of the saved tensor autograd last unpacked, i.e. of the forward op whose
gradient is running. Each unpack of a tensor on a numbered saved storage is an
op of its own, ``<module>.unpack`` (no FLOPs, no bytes), reading that tensor
where autograd unpacks it: at the start of its gradient's node, before the
node's aten ops, so a storage's first backward use is where ``offload`` needs
it back (and sees it unpacked), and the unpacks of one node come before the
frees of what it saved.

The format is traces/FORMAT.md (version 1); the C++ reader validates it on
load, so ``ssdtrain plan --trace`` and ``ssdtrain replay --trace`` take the
file as it is. The header's model dims (hidden, heads, layers, ...) are not
knowable from ops; give them in ``header=`` (they default to 1).
"""

import json
import os
import re
import tempfile
import threading

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from . import _engine
from .saved import SaveOrder, saved_index, saved_name

FORMAT = "ssdtrain-trace"
VERSION = 1

# PyTorch's vocabulary (which ops are views, each op's kind, a matrix product's
# dims, the trace dtype of a torch dtype) is decided once, in C++
# (traces/torch_ops.h), for this capture and for the importer of PyTorch
# execution traces alike.
_LAYER = re.compile(r"(?:^|\.)(\d+)(?:\.|$)")


def _dtype_name(dtype, where):
    name = _engine.torch_dtype(str(dtype))
    if name is None:
        raise ValueError(f"capture: {where}: dtype {dtype} has no trace dtype "
                         f"(known: {_engine.torch_dtype_names()})")
    return name


def _nbytes(t):
    return t.numel() * t.element_size()


def storage_shape(t):
    """The shape of the trace row for t's storage when t is the first tensor seen on
    it: t's own shape when t covers the storage, else the storage as a flat array of
    t's dtype (the format wants a root row's bytes to match its shape)."""
    nbytes = t.storage().nbytes()
    return list(t.shape) if _nbytes(t) == nbytes else [nbytes // t.element_size()]


def _layer_of(name):
    m = _LAYER.search(name)
    return int(m.group(1)) if m else -1


def _arg_shapes(args):
    """Each argument's shape in schema order, a non-tensor's empty (traces/torch_ops.h)."""
    return [list(a.shape) if isinstance(a, torch.Tensor) else [] for a in args]


class _Recorder:
    """Builds the trace's tables while the step runs."""

    def __init__(self, model, inputs):
        self.tensors = []  # trace rows (dicts)
        self.ops = []
        self.ids = {}  # id(tensor object) -> row
        self.keep = []  # every tensor seen, so that no id() or address is reused
        self.storage_root = {}  # (device, storage address) -> root row
        self.params = {id(p): n for n, p in model.named_parameters()}
        self.params.update({id(b): n for n, b in model.named_buffers()})
        self.inputs = {id(t) for t in tree_flatten(inputs)[0] if isinstance(t, torch.Tensor)}
        self.phase = "forward"
        self.backward_module = ""
        self.order = SaveOrder(model)
        self.lock = threading.Lock()

    # ---- tensors ----------------------------------------------------------

    def row_of(self, t, producer, where):
        """The row of tensor object t, adding one (produced by `producer`)."""
        key = id(t)
        if key in self.ids:
            return self.ids[key]
        rid = len(self.tensors)
        self.keep.append(t)
        self.ids[key] = rid
        storage = t.storage()
        skey = (str(t.device), storage.data_ptr()) if storage.nbytes() > 0 else None
        root = self.storage_root.get(skey) if skey is not None else None
        dtype = _dtype_name(t.dtype, where)
        if root is not None:
            nbytes = min(_nbytes(t), self.tensors[root]["bytes"])
            shape = list(t.shape)
        else:
            nbytes = storage.nbytes()
            shape = storage_shape(t)
            if skey is not None:
                self.storage_root[skey] = rid
        module = self.current_module()
        if key in self.params:
            kind, name = "weight", self.params[key]
        elif key in self.inputs:
            kind, name = "input", f"input{rid}"
        elif self.recomputing():  # lives until the block's gradient is done
            kind, name = "workspace", f"{module}.t{rid}"
        else:
            kind = "gradient" if self.phase == "backward" else "activation"
            name = f"{module or '<model>'}.t{rid}"
        self.tensors.append(dict(
            id=rid, name=name, bytes=nbytes, dtype=dtype, shape=shape, kind=kind,
            producer=producer, consumers=[], saved_for_backward=False,
            alias_of=root, layer=_layer_of(name), micro_batch=0, offloadable=False))
        return rid

    # ---- ops --------------------------------------------------------------

    def recomputing(self):
        """A module's forward runs in backward: a checkpointed block's recomputation."""
        return self.phase == "backward" and bool(self.order.stack)

    def current_module(self):
        if self.recomputing():
            return self.order.module() + ".recompute"
        if self.phase == "backward":
            return self.backward_module
        return self.order.module() if self.order.stack else ""

    def record(self, func, args, kwargs, out):
        with self.lock:
            self._record(func, args, kwargs, out)

    def _record(self, func, args, kwargs, out):
        op_name = func.overloadpacket.__name__
        module = self.current_module()
        oid = len(self.ops)
        where = f"op {oid} ({op_name} in {module or '<model>'})"
        flat_in = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        flat_out = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        inputs = []
        for t in flat_in:
            r = self.row_of(t, None, where)
            if r not in inputs:
                inputs.append(r)
        outputs = []
        for t in flat_out:
            if id(t) in self.ids:  # in place (add_, out=): it reads and writes that tensor
                r = self.ids[id(t)]
                if r not in inputs:
                    inputs.append(r)
                continue
            r = self.row_of(t, oid, where)
            outputs.append(r)
        for r in inputs:
            self.tensors[r]["consumers"].append(oid)
        kind, is_view = _engine.torch_op(op_name)
        shapes = [] if is_view else _arg_shapes(args)
        dims = None if is_view else _engine.torch_gemm_dims(op_name, shapes)
        attention = None if is_view or dims else _engine.torch_attention_flops(op_name, shapes)
        if dims is not None:
            m, n, k, batch = (int(x) for x in dims)
            flops = 2 * m * n * k * batch
        elif attention is not None:
            flops = attention
        else:
            flops = 0 if is_view else sum(t.numel() for t in flat_out)
            if kind in ("gemm", "attention"):  # shapes it could not read: no dims
                kind = "elementwise"
        if is_view:
            bytes_read = bytes_written = 0
        else:
            bytes_read = sum(min(_nbytes(t), self.tensors[self.ids[id(t)]]["bytes"])
                             for t in flat_in)
            bytes_written = sum(_nbytes(t) for t in flat_out)
        self.ops.append(dict(
            id=oid, name=f"{module or '<model>'}.{op_name}", kind=kind, phase=self.phase,
            layer=_layer_of(module), micro_batch=0, stage=0, stream=0, inputs=inputs,
            outputs=outputs, flops=int(flops), bytes_read=int(bytes_read),
            bytes_written=int(bytes_written),
            gemm=None if dims is None else dict(m=m, n=n, k=k, batch=batch)))

    # ---- saved tensors ----------------------------------------------------

    def pack(self, t):
        with self.lock:
            r = self.row_of(t, None, "a saved tensor")
            # The module its gradient's ops are named by (the recomputed block's own).
            module = self.order.module() if self.recomputing() else self.current_module()
            self.tensors[r].setdefault("_module", module)
            if self.phase == "backward":  # a checkpointed block's recomputation saves
                return t  # for its own gradient only: nothing lives across the gap
            self.tensors[r]["saved_for_backward"] = True
            seen = self.order.see(t)
            if seen is not None and seen[1]:
                root = _root(self.tensors, r)
                self.tensors[root]["name"] = saved_name(seen[0].module, root, seen[0].index)
        return t

    def unpack(self, t):
        with self.lock:
            r = self.ids.get(id(t))
            if r is not None:
                self.backward_module = self.tensors[r].get("_module", "")
                root = self.tensors[_root(self.tensors, r)]
                if saved_index(root["name"]) is not None and not self.recomputing():
                    self._record_unpack(r)
        return t

    def _record_unpack(self, r):
        """An op that reads saved tensor r (on a numbered storage: what offload
        sees unpacked) where autograd unpacks it: at the start of its gradient's
        node, before that node's aten ops (and before the node ends and autograd
        frees what it saved), where ``offload`` reads it back."""
        oid = len(self.ops)
        self.tensors[r]["consumers"].append(oid)
        self.ops.append(dict(
            id=oid, name=f"{self.backward_module or '<model>'}.unpack", kind="elementwise",
            phase="backward", layer=_layer_of(self.backward_module), micro_batch=0, stage=0,
            stream=0, inputs=[r], outputs=[], flops=0, bytes_read=0, bytes_written=0, gemm=None))


def _returns_tensor(func):
    returns = func._schema.returns
    return len(returns) == 1 and str(returns[0].type) == "Tensor"


class _Mode(TorchDispatchMode):
    def __init__(self, recorder):
        super().__init__()
        self.recorder = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if args and isinstance(args[0], (int, float, bool)) and \
                func.overloadpacket.__name__ in ("detach", "alias"):
            # The other half of the case below: a hook that detaches such a
            # number (torch.utils.checkpoint's) is handed the Python number.
            return torch.tensor(args[0])
        out = func(*args, **(kwargs or {}))
        if isinstance(out, (int, float, bool)) and isinstance(args[0], torch.Tensor) and \
                _returns_tensor(func):
            # torch 1.13 turns a detached wrapped number (the 8 saved by x / 8) into
            # a Python number on the way out of the mode, and autograd wants a
            # tensor back: hand it one of the same dtype.
            return torch.tensor(out, dtype=args[0].dtype)
        self.recorder.record(func, args, kwargs or {}, out)
        return out


def _finish(rec, header, min_bytes):
    """Fixes up what the format needs once the step is over."""
    # A tensor only some op's input (weights, inputs, tensors made outside the mode)
    # has no producer: it is a weight or a step input.
    for t in rec.tensors:
        t.pop("_module", None)
        if t["producer"] is None and t["kind"] in ("activation", "gradient"):
            t["kind"] = "input"
    # A model without numbered modules (one block captured alone) is one layer,
    # 0: the planners treat layer -1 as embedding and head, never offloaded.
    if all(t["layer"] == -1 for t in rec.tensors) and all(o["layer"] == -1 for o in rec.ops):
        for row in rec.tensors + rec.ops:
            row["layer"] = 0
    # Offloadable: activations (by storage) of at least min_bytes.
    for t in rec.tensors:
        root = t if t["alias_of"] is None else rec.tensors[_root(rec.tensors, t["id"])]
        t["offloadable"] = (root["kind"] == "activation" and root["bytes"] >= min_bytes)
    h = dict(model="captured", family="gpt", hidden=1, heads=1, kv_heads=1, layers=1,
             ffn_hidden=1, vocab=1, seq_len=1, micro_batch=1, tp=1, sequence_parallel=False,
             pp=1, stage=0, first_layer=0, stage_layers=1, dtype="fp32", attention="standard",
             units={"time": "ns", "size": "bytes"})
    h.update(header or {})
    if "stage_layers" not in (header or {}):
        h["stage_layers"] = h["layers"]
    return dict(format=FORMAT, version=VERSION, header=h, tensors=rec.tensors, ops=rec.ops,
                edges=[])


def _root(tensors, i):
    while tensors[i]["alias_of"] is not None:
        i = tensors[i]["alias_of"]
    return i


def saved_bytes(trace):
    """Unique saved activation bytes of a trace (JSON dict): the bytes of every
    storage (alias root) of kind activation on which some tensor is saved."""
    roots = {_root(trace["tensors"], t["id"]) for t in trace["tensors"] if t["saved_for_backward"]}
    return sum(trace["tensors"][r]["bytes"] for r in roots
               if trace["tensors"][r]["kind"] == "activation")


def capture(model, example_inputs, loss_fn=None, path=None, header=None, min_bytes=64 << 10):
    """Runs model(*example_inputs), loss_fn(output) (default: output.sum()) and
    backward once, recording a trace; writes it to `path` (JSON) when given and
    returns it as a dict. Gradients the step makes are left in the parameters'
    .grad (zero them if that matters). `header` sets trace header fields (model,
    family, hidden, heads, layers, seq_len, micro_batch, dtype, ...)."""
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    rec = _Recorder(model, example_inputs)
    hooks = rec.order.hooks(model)
    try:
        with torch.autograd.graph.saved_tensors_hooks(rec.pack, rec.unpack), _Mode(rec):
            out = model(*example_inputs)
            loss = loss_fn(out) if loss_fn is not None else out.sum()
            rec.phase = "backward"
            rec.order.start_backward()
            loss.backward()
    finally:
        for h in hooks:
            h.remove()
    trace = _finish(rec, header, min_bytes)
    if path is not None:
        d = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".capture-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(trace))  # the bytes json.dump writes, encoded in C
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    return trace
