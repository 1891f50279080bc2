"""An offload failure on one data-parallel rank, told to the others.

Under torch.distributed (DistributedDataParallel), a rank whose offload fails
raises ``OffloadError`` and leaves the step; the other ranks are then waiting
in a collective (the gradient all-reduce) that fails once the failed rank's
process group goes away, with the backend's message ("Connection closed by
peer"), which says nothing of why. So the failing rank writes its message to
the process group's store (``publish``) before it raises, and an offload block
that ends by any other exception while a process group is up reads it back
(``peer_failure``) and raises ``OffloadError`` naming that rank, its saved
tensor and its file instead. Without an initialized process group both do
nothing.
"""

_COUNT = "ssdtrain/offload-failures"
_MESSAGE = "ssdtrain/offload-error"


def _store():
    try:
        import torch.distributed as dist
        if not (dist.is_available() and dist.is_initialized()):
            return None, None
        from torch.distributed.distributed_c10d import _get_default_store
        return _get_default_store(), dist.get_rank()
    except (ImportError, RuntimeError):
        return None, None


def publish(message):
    """Tells the other ranks that this rank's offload failed with `message`."""
    store, rank = _store()
    if store is None:
        return
    try:
        store.set(_MESSAGE, f"rank {rank}: {message}")
        store.add(_COUNT, 1)
    except RuntimeError:
        pass  # the store is gone: the other ranks see the backend's error alone


def peer_failure():
    """The message of another rank's offload failure, or None."""
    store, rank = _store()
    if store is None:
        return None
    try:
        if store.add(_COUNT, 0) == 0:
            return None
        message = store.get(_MESSAGE).decode()
    except RuntimeError:
        return None
    return None if message.startswith(f"rank {rank}: ") else message
