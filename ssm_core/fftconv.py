"""Long convolution by FFT: y = u * K (+ D u), causal or bidirectional (S4D Listing 1, forward)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def bidirectional_kernel(k: Tensor) -> Tensor:
    """Two causal kernels back to back (S4D Appendix B, "Bidirectional"; Goel et al.).

    k: (2, C, H, L) forward and backward halves -> (C, H, 2L): k_fwd at lags 0..L-1, k_bwd flipped at lags -L..-1.
    """
    return F.pad(k[0], (0, k.shape[-1])) + F.pad(k[1].flip(-1), (k.shape[-1], 0))


def fft_conv(u: Tensor, k: Tensor, d: Tensor | None = None) -> Tensor:
    """y[..., c, h, l] = sum_j k[c, h, j] u[..., h, l - j] (+ d[c, h] u[..., h, l]).

    u: (B, H, L); k: (C, H, Lk) with Lk = L (causal) or 2L (bidirectional, from :func:`bidirectional_kernel`,
    where lag j >= L wraps to negative lags). Returns (B, C, H, L).
    """
    length = u.shape[-1]
    n = 2 * length  # zero padding to 2L makes the circular convolution linear for lags in [-L, L)
    u_f = torch.fft.rfft(u, n=n)  # (B, H, L+1)
    k_f = torch.fft.rfft(k, n=n)  # (C, H, L+1)
    y = torch.fft.irfft(u_f.unsqueeze(-3) * k_f, n=n)[..., :length]  # (B, C, H, L)
    if d is not None:
        y = y + u.unsqueeze(-3) * d[..., None]
    return y
