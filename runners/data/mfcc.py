"""MFCC features in torch, with the parameters of the S4 code's Speech Commands MFCC column (S4 Table 5).

The S4 code calls torchaudio ``MFCC(sample_rate=16000, n_mfcc=20, log_mels=True,
melkwargs=dict(n_fft=200, n_mels=64))``. With torchaudio's defaults filled in that is: a 200-sample
(12.5 ms) periodic Hann window, hop 100 (= n_fft // 2), centred frames with reflect padding
(1 + 16000 // 100 = 161 frames of a 1 s clip), the power spectrogram, 64 triangular mel filters on the HTK
mel scale from 0 Hz to the Nyquist frequency without area normalisation, log(mel + 1e-6), and the
orthonormal DCT-II keeping 20 coefficients. With n_fft = 200 the lowest filters are narrower than one
FFT bin and stay zero (their log is log(1e-6)), as in torchaudio.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class MFCCParams:
    sample_rate: int = 16000
    n_fft: int = 200
    win_length: int = 200
    hop_length: int = 100
    n_mels: int = 64
    f_min: float = 0.0
    f_max: float = 8000.0
    log_offset: float = 1e-6
    n_mfcc: int = 20

    def as_dict(self) -> dict:
        return asdict(self)


#: The S4 code's parameters (module docstring).
S4_MFCC = MFCCParams()


def hz_to_mel(f: torch.Tensor | float) -> torch.Tensor | float:
    """HTK mel scale: 2595 log10(1 + f / 700)."""
    if isinstance(f, torch.Tensor):
        return 2595.0 * torch.log10(1.0 + f / 700.0)
    return 2595.0 * math.log10(1.0 + f / 700.0)


def mel_to_hz(m: torch.Tensor) -> torch.Tensor:
    return 700.0 * (torch.pow(10.0, m / 2595.0) - 1.0)


def mel_filterbank(p: MFCCParams) -> torch.Tensor:
    """Triangular filters (n_mels, n_fft // 2 + 1), float64: filter i rises from edge i to edge i + 1 and falls
    to edge i + 2, the n_mels + 2 edges equally spaced in mel between f_min and f_max; peak 1 (no area norm)."""
    bins = torch.linspace(0.0, p.sample_rate / 2, p.n_fft // 2 + 1, dtype=torch.float64)  # (F,) bin centres, Hz
    edges = mel_to_hz(torch.linspace(hz_to_mel(p.f_min), hz_to_mel(p.f_max), p.n_mels + 2,
                                     dtype=torch.float64))  # (n_mels + 2,)
    gaps = edges[1:] - edges[:-1]  # (n_mels + 1,)
    rising = (bins[None, :] - edges[:-2, None]) / gaps[:-1, None]  # (n_mels, F)
    falling = (edges[2:, None] - bins[None, :]) / gaps[1:, None]  # (n_mels, F)
    return torch.minimum(rising, falling).clamp_min(0.0)


def dct_ii_ortho(n_out: int, n_in: int) -> torch.Tensor:
    """Orthonormal DCT-II matrix (n_out, n_in), float64: row k = s_k cos(pi k (n + 1/2) / n_in),
    s_0 = sqrt(1 / n_in), s_k = sqrt(2 / n_in)."""
    n = torch.arange(n_in, dtype=torch.float64)
    k = torch.arange(n_out, dtype=torch.float64)
    basis = torch.cos(math.pi / n_in * torch.outer(k, n + 0.5))
    scale = torch.full((n_out, 1), math.sqrt(2.0 / n_in), dtype=torch.float64)
    scale[0] = math.sqrt(1.0 / n_in)
    return basis * scale


def mfcc(waves: torch.Tensor, p: MFCCParams = S4_MFCC) -> torch.Tensor:
    """MFCC of waveforms: waves (..., T) -> (..., 1 + T // hop_length, n_mfcc), computed in float64 and
    returned in float64."""
    lead, length = waves.shape[:-1], waves.shape[-1]
    x = waves.reshape(-1, length).to(torch.float64)  # (B, T)
    window = torch.hann_window(p.win_length, periodic=True, dtype=torch.float64)
    spec = torch.stft(x, p.n_fft, hop_length=p.hop_length, win_length=p.win_length, window=window, center=True,
                      pad_mode="reflect", return_complex=True)  # (B, F, frames)
    power = spec.real.square() + spec.imag.square()  # (B, F, frames)
    log_mel = torch.log(mel_filterbank(p) @ power + p.log_offset)  # (B, n_mels, frames)
    coeffs = dct_ii_ortho(p.n_mfcc, p.n_mels) @ log_mel  # (B, n_mfcc, frames)
    return coeffs.transpose(-1, -2).reshape(*lead, coeffs.shape[-1], p.n_mfcc)
