"""SSM convolution kernels: diagonal (S4D / DSS), DPLR (S4), and the dense reference."""
from .dense import dense_kernel, discretize_dense
from .diag import DiagKernel
from .dplr import DPLRKernel

__all__ = ["DiagKernel", "DPLRKernel", "dense_kernel", "discretize_dense"]
