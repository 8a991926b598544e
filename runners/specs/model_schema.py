"""Schemas of the model settings a spec passes to ssm_core (SequenceModel / SSMLayer / kernels, the Transformer
baseline, LSSL): every key known, every value of the right type and range, checked before anything is built.

Each is a pydantic model of the vocabulary in runners/specs/schema.py; ``check_*`` validates a mapping against it
and raises ValueError whose message starts with the key path under ``where`` (for example
``models.S4.model.layer.d_state: 0 not allowed; expected an even integer in [2, 65536]``), then checks the rules
across keys.
"""
from __future__ import annotations

from typing import Annotated, Any, Optional

from pydantic import AfterValidator, BaseModel, ValidationError

from ssm_core.baselines.attention import ATTENTIONS
from ssm_core.baselines.lssl import KRYLOV_METHODS
from ssm_core.blocks import NORMS, POOLS
from ssm_core.inits import DIAGONAL_INITS
from ssm_core.kernels.diag import NORMALIZATIONS
from ssm_core.kernels.dplr import INITS as DPLR_INITS
from ssm_core.kernels.params import DISCRETIZATIONS, REAL_TRANSFORMS, check_lr
from ssm_core.layers import ACTIVATIONS, MODES, OUTPUTS
from ssm_core.ops.backend import BACKENDS

from .schema import (MAX_LENGTH, MAX_STATE, MAX_WIDTH, STRICT, UNSET, Bool, Choice, Int, Mapping, Num, check_int,
                     problems)

MAX_LAYERS = 1024
MAX_CHANNELS = 256
MAX_VOCAB = 1 << 24
#: the Transformer's attention implementations
ATTENTION_IMPLS = ("materialized", "sdpa")


def _ssm_lr(value: Any) -> Any:
    """The SSM parameters' learning rate (ssm_core.kernels.params.check_lr): a number, None, or {dt, A, B}."""
    check_lr(value)
    return value


#: the dropout probability of a layer
Dropout = Num(0, 1, hi_open=True)
#: a step size's bound
StepSize = Num(0, 10, lo_open=True)


class LayerArgs(BaseModel):
    """SSMLayer and its kernels' keyword arguments (d_model comes from the model)."""

    model_config = STRICT

    d_state: Int(2, MAX_STATE, even=True) = UNSET  # N: N/2 complex modes are stored
    mode: Choice(MODES) = UNSET
    init: Any = UNSET  # checked against the mode (check_layer)
    bidirectional: Bool = UNSET
    channels: Int(1, MAX_CHANNELS) = UNSET
    activation: Choice(ACTIVATIONS) = UNSET
    output: Choice(OUTPUTS) = UNSET
    dropout: Dropout = UNSET
    transposed: Bool = UNSET
    dt_min: StepSize = UNSET
    dt_max: StepSize = UNSET
    lr: Annotated[Any, AfterValidator(_ssm_lr)] = UNSET  # a number, None, or {dt, A, B} (None: the global rate)
    backend: Optional[Choice(BACKENDS)] = UNSET
    # kernel keyword arguments
    discretization: Choice(DISCRETIZATIONS) = UNSET
    real_transform: Choice(REAL_TRANSFORMS) = UNSET
    normalization: Choice(NORMALIZATIONS) = UNSET
    trainable_a: Bool = UNSET
    trainable_b: Bool = UNSET
    tie_ab: Bool = UNSET
    l_max: Optional[Int(1, MAX_LENGTH)] = UNSET
    init_kwargs: Optional[Mapping] = UNSET


#: kernel keys that only one family of kernels takes
DPLR_ONLY = {"l_max"}
DIAG_ONLY = {"discretization", "normalization", "init_kwargs"}


class SequenceModelArgs(BaseModel):
    """ssm_core.SequenceModel keyword arguments (without d_input, d_output, vocab_size: the task sets them)."""

    model_config = STRICT

    d_model: Int(1, MAX_WIDTH) = UNSET
    n_layers: Int(1, MAX_LAYERS) = UNSET
    layer: Mapping = UNSET
    norm: Choice(NORMS) = UNSET
    prenorm: Bool = UNSET
    dropout: Dropout = UNSET
    pool: Choice(POOLS) = UNSET
    mask_padding: Bool = UNSET
    encoder_bias: Bool = UNSET


class TransformerArgs(BaseModel):
    """TransformerModel keyword arguments (without vocab_size, d_output, d_input)."""

    model_config = STRICT

    d_model: Int(1, MAX_WIDTH) = UNSET
    n_layers: Int(1, MAX_LAYERS) = UNSET
    n_heads: Int(1, 1024) = UNSET
    qkv_dim: Optional[Int(1, MAX_WIDTH)] = UNSET
    ffn_dim: Int(0, 1 << 18) = UNSET
    attention: Choice(ATTENTIONS) = UNSET
    impl: Choice(ATTENTION_IMPLS) = UNSET
    causal: Bool = UNSET
    pool: Choice(POOLS) = UNSET
    n_features: Optional[Int(1, 1 << 16)] = UNSET
    dropout: Dropout = UNSET
    feature_seed: Int(0, 2**32 - 1) = UNSET  # a seed: numpy's range, as every seed of a spec (runners/specs/spec.py)


class LSSLArgs(BaseModel):
    """LSSL keyword arguments (d_model and d_state come from the runner)."""

    model_config = STRICT

    dt_min: StepSize = UNSET
    dt_max: StepSize = UNSET
    trainable_a: Bool = UNSET
    trainable_b: Bool = UNSET
    krylov_method: Choice(KRYLOV_METHODS) = UNSET
    activation: Choice(ACTIVATIONS) = UNSET
    dropout: Dropout = UNSET


def _check_keys(where: str, kwargs: Any, schema: type[BaseModel]) -> None:
    """``kwargs`` validated by ``schema``: ValueError "<where>: unknown key(s) [...]; allowed: [...]" or
    "<where>.<key>: <value> not allowed; ..." for the first problem."""
    if not isinstance(kwargs, dict):
        raise ValueError(f"{where}: {kwargs!r} not allowed; expected a mapping")
    try:
        schema.model_validate(kwargs)
    except ValidationError as exc:
        found = problems(exc)
        unknown = sorted(p.key for p in found if p.kind == "unknown")
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(schema.model_fields)}") from None
        first = found[0]
        raise ValueError(f"{where}.{first.key}: {first.text}") from None


def check_layer(where: str, kwargs: Any) -> None:
    """SSMLayer keyword arguments (without d_model, which the model sets)."""
    _check_keys(where, kwargs, LayerArgs)
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
    _check_keys(where, kwargs, SequenceModelArgs)
    check_layer(f"{where}.layer", kwargs.get("layer", {}))


def check_transformer(where: str, kwargs: Any) -> None:
    """TransformerModel keyword arguments (without vocab_size, d_output, d_input)."""
    _check_keys(where, kwargs, TransformerArgs)
    d_model, n_heads = kwargs.get("d_model", 256), kwargs.get("n_heads", 4)
    qkv = kwargs.get("qkv_dim") or d_model
    if qkv % n_heads:
        raise ValueError(f"{where}.n_heads: {n_heads!r} not allowed; expected a divisor of qkv_dim ({qkv})")
    if kwargs.get("n_features") is not None and kwargs.get("attention", "softmax") != "performer":
        raise ValueError(f"{where}.n_features: applies to attention 'performer' only")


def check_lssl(where: str, kwargs: Any) -> None:
    _check_keys(where, kwargs, LSSLArgs)


def check_vocab(key: str, value: Any) -> None:
    check_int(key, value, 1, MAX_VOCAB)
