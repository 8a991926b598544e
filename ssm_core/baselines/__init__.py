"""Baselines of the S4 efficiency tables: the LSSL (S4 Table 2) and attention models (S4 Tables 3, 7, 8)."""
from .attention import (MultiHeadAttention, TransformerBlock, TransformerModel, elu_feature_map, favor_feature_map,
                        kernel_attention, orthogonal_random_features, softmax_attention)
from .lssl import LSSL, krylov

__all__ = ["LSSL", "MultiHeadAttention", "TransformerBlock", "TransformerModel", "elu_feature_map",
           "favor_feature_map", "kernel_attention", "krylov", "orthogonal_random_features", "softmax_attention"]
