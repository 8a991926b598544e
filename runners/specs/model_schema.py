"""Schemas of the model settings a spec passes to ssm_core (SequenceModel / SSMLayer / kernels, the Transformer
baseline, LSSL): every key known, every value of the right type and range, checked before anything is built.

Each ``check_*`` raises ValueError whose message starts with the key path under ``where`` (for example
``models.S4.model.layer.d_state: 0 not allowed; expected an even integer in [2, 65536]``).
"""
from __future__ import annotations

from typing import Any, Callable

from ssm_core.baselines.attention import ATTENTIONS
from ssm_core.baselines.lssl import KRYLOV_METHODS
from ssm_core.blocks import NORMS, POOLS
from ssm_core.inits import DIAGONAL_INITS
from ssm_core.kernels.diag import NORMALIZATIONS
from ssm_core.kernels.dplr import INITS as DPLR_INITS
from ssm_core.kernels.params import DISCRETIZATIONS, REAL_TRANSFORMS, check_lr
from ssm_core.layers import ACTIVATIONS, MODES, OUTPUTS
from ssm_core.ops.backend import BACKENDS

from .schema import MAX_LENGTH, MAX_STATE, MAX_WIDTH, check_bool, check_choice, check_int, check_num

MAX_LAYERS = 1024
MAX_CHANNELS = 256
MAX_VOCAB = 1 << 24

Check = Callable[[str, Any], None]


def _opt(check: Check) -> Check:
    """``check`` that also admits None (the library's default)."""
    return lambda key, v: None if v is None else check(key, v)


def _int(lo: int, hi: int, even: bool = False) -> Check:
    return lambda key, v: check_int(key, v, lo, hi, even=even)


def _num(lo: float | None = None, hi: float | None = None, lo_open: bool = False, hi_open: bool = False) -> Check:
    return lambda key, v: check_num(key, v, lo, hi, lo_open=lo_open, hi_open=hi_open)


def _choice(choices: Any) -> Check:
    return lambda key, v: check_choice(key, v, list(choices))


def _ssm_lr(key: str, v: Any) -> None:
    """The SSM parameters' learning rate (ssm_core.kernels.params.check_lr), the message under ``key``."""
    try:
        check_lr(v)
    except ValueError as exc:
        raise ValueError(f"{key}: {exc}") from None


def _dict(key: str, v: Any) -> None:
    if not isinstance(v, dict):
        raise ValueError(f"{key}: {v!r} not allowed; expected a mapping")


_DROPOUT = _num(0, 1, hi_open=True)
_DT = _num(0, 10, lo_open=True)

#: SSMLayer and its kernels' keyword arguments (d_model comes from the model)
LAYER_KEYS: dict[str, Check] = {
    "d_state": _int(2, MAX_STATE, even=True),  # N: N/2 complex modes are stored
    "mode": _choice(MODES),
    "init": lambda key, v: None,  # checked against the mode below
    "bidirectional": check_bool,
    "channels": _int(1, MAX_CHANNELS),
    "activation": _choice(ACTIVATIONS),
    "output": _choice(OUTPUTS),
    "dropout": _DROPOUT,
    "transposed": check_bool,
    "dt_min": _DT,
    "dt_max": _DT,
    "lr": _ssm_lr,  # a number, None, or {dt, A, B} (None there: the global learning rate)
    "backend": _opt(_choice(BACKENDS)),
    # kernel keyword arguments
    "discretization": _choice(DISCRETIZATIONS),
    "real_transform": _choice(REAL_TRANSFORMS),
    "normalization": _choice(NORMALIZATIONS),
    "trainable_a": check_bool,
    "trainable_b": check_bool,
    "tie_ab": check_bool,
    "l_max": _opt(_int(1, MAX_LENGTH)),
    "init_kwargs": _opt(_dict),
}
#: kernel keys that only one family of kernels takes
DPLR_ONLY = {"l_max"}
DIAG_ONLY = {"discretization", "normalization", "init_kwargs"}

SEQUENCE_MODEL_KEYS: dict[str, Check] = {
    "d_model": _int(1, MAX_WIDTH),
    "n_layers": _int(1, MAX_LAYERS),
    "layer": _dict,
    "norm": _choice(NORMS),
    "prenorm": check_bool,
    "dropout": _DROPOUT,
    "pool": _choice(POOLS),
    "mask_padding": check_bool,
    "encoder_bias": check_bool,
}

TRANSFORMER_KEYS: dict[str, Check] = {
    "d_model": _int(1, MAX_WIDTH),
    "n_layers": _int(1, MAX_LAYERS),
    "n_heads": _int(1, 1024),
    "qkv_dim": _opt(_int(1, MAX_WIDTH)),
    "ffn_dim": _int(0, 1 << 18),
    "attention": _choice(ATTENTIONS),
    "impl": _choice(("materialized", "sdpa")),
    "causal": check_bool,
    "pool": _choice(POOLS),
    "n_features": _opt(_int(1, 1 << 16)),
    "dropout": _DROPOUT,
    "feature_seed": _int(0, 2**32 - 1),  # a seed: numpy's range, as every seed of a spec (runners/specs/spec.py)
}

LSSL_KEYS: dict[str, Check] = {
    "dt_min": _DT, "dt_max": _DT, "trainable_a": check_bool, "trainable_b": check_bool,
    "krylov_method": _choice(KRYLOV_METHODS), "activation": _choice(ACTIVATIONS), "dropout": _DROPOUT,
}


def _check_keys(where: str, kwargs: Any, schema: dict[str, Check]) -> None:
    if not isinstance(kwargs, dict):
        raise ValueError(f"{where}: {kwargs!r} not allowed; expected a mapping")
    allowed = sorted(schema)
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {allowed}")
    for key, value in kwargs.items():
        schema[key](f"{where}.{key}", value)


def check_layer(where: str, kwargs: Any) -> None:
    """SSMLayer keyword arguments (without d_model, which the model sets)."""
    _check_keys(where, kwargs, LAYER_KEYS)
    mode = kwargs.get("mode", "s4d")
    init = kwargs.get("init", "legs")
    inits = DPLR_INITS if mode == "s4" else DIAGONAL_INITS
    if init not in inits:
        raise ValueError(f"{where}.init: {init!r} not allowed with mode {mode!r}; choose one of {list(inits)}")
    wrong = sorted(set(kwargs) & (DIAG_ONLY if mode == "s4" else DPLR_ONLY))
    if wrong:
        raise ValueError(f"{where}: key(s) {wrong} do not apply to mode {mode!r}")
    if kwargs.get("dt_min", 1e-3) > kwargs.get("dt_max", 1e-1):
        raise ValueError(f"{where}.dt_max: {kwargs.get('dt_max', 1e-1)!r} not allowed; expected >= dt_min "
                         f"({kwargs.get('dt_min', 1e-3)!r})")
    if kwargs.get("output", "glu") == "none" and kwargs.get("channels", 1) != 1:
        raise ValueError(f"{where}.channels: {kwargs['channels']!r} not allowed with output 'none'; expected 1")


def check_sequence_model(where: str, kwargs: Any) -> None:
    """ssm_core.SequenceModel keyword arguments (without d_input, d_output, vocab_size: the task sets them)."""
    _check_keys(where, kwargs, SEQUENCE_MODEL_KEYS)
    check_layer(f"{where}.layer", kwargs.get("layer", {}))


def check_transformer(where: str, kwargs: Any) -> None:
    """TransformerModel keyword arguments (without vocab_size, d_output, d_input)."""
    _check_keys(where, kwargs, TRANSFORMER_KEYS)
    d_model, n_heads = kwargs.get("d_model", 256), kwargs.get("n_heads", 4)
    qkv = kwargs.get("qkv_dim") or d_model
    if qkv % n_heads:
        raise ValueError(f"{where}.n_heads: {n_heads!r} not allowed; expected a divisor of qkv_dim ({qkv})")
    if kwargs.get("n_features") is not None and kwargs.get("attention", "softmax") != "performer":
        raise ValueError(f"{where}.n_features: applies to attention 'performer' only")


def check_lssl(where: str, kwargs: Any) -> None:
    _check_keys(where, kwargs, LSSL_KEYS)


def check_vocab(key: str, value: Any) -> None:
    check_int(key, value, 1, MAX_VOCAB)
