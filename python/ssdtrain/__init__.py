"""ssdtrain for PyTorch: offload saved activations to SSD files through ssdtrain's
C++ engine (``offload``), and capture real models into ssdtrain traces."""

from .capture import capture, saved_bytes
from .offload import DEFAULT_MIN_BYTES, POLICIES, Offload, OffloadError, offload

__all__ = ["capture", "saved_bytes", "DEFAULT_MIN_BYTES", "POLICIES", "Offload", "OffloadError", "offload"]
