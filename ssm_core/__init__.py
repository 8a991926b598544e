"""ssm_core: S4, S4D and DSS layers (PyTorch), HiPPO and diagonal initializations, Cauchy / Vandermonde ops."""
from .blocks import DualSequenceClassifier, ResidualBlock, SequenceModel
from .layers import SSMLayer

__all__ = ["SSMLayer", "SequenceModel", "ResidualBlock", "DualSequenceClassifier"]
