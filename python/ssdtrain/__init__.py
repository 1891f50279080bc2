"""ssdtrain for PyTorch: offload saved activations to SSD files through ssdtrain's
C++ engine (``offload``, by a policy or by a plan made for a captured trace), and
capture real models into ssdtrain traces."""

from .capture import capture, saved_bytes
from .offload import DEFAULT_MIN_BYTES, POLICIES, Offload, OffloadError, offload
from .plan import PlanError
from .saved import saved_index

__all__ = ["capture", "saved_bytes", "DEFAULT_MIN_BYTES", "POLICIES", "Offload", "OffloadError",
           "offload", "PlanError", "saved_index"]
