"""Every dataset the training tables use, by name: loaders (published layouts) and preparers (generators,
stand-ins) that write such a layout into a directory of the suite's own."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from .base import TaskData


def _lra(task: str) -> Callable[..., TaskData]:
    def load(root: Path, **kwargs: Any) -> TaskData:
        from .lra import LRA_LOADERS

        return LRA_LOADERS[task](root, **kwargs)

    def target() -> Callable[..., Any]:
        from .lra import LRA_LOADERS

        return LRA_LOADERS[task]

    load.target = target  # type: ignore[attr-defined]
    return load


def _lazy(module: str, name: str) -> Callable[..., Any]:
    def target() -> Callable[..., Any]:
        import importlib

        return getattr(importlib.import_module(module, __package__), name)

    def call(*args: Any, **kwargs: Any) -> Any:
        return target()(*args, **kwargs)

    call.target = target  # type: ignore[attr-defined]
    return call


#: arguments the framework passes itself (the data root, the progress flag), never given in a spec
FRAMEWORK_ARGS = {"root", "data_dir", "out", "progress"}


def check_arguments(fn: Callable[..., Any], args: dict, where: str) -> None:
    """Raise ValueError naming ``where`` and the key for an argument that ``fn`` (a loader or preparer of this
    registry) does not take, or a value whose type its annotation (bool, int, float, str) rules out."""
    import inspect

    target = getattr(fn, "target", None)  # the registry's lazy wrappers name the function they call
    params = inspect.signature(target() if target else fn).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    allowed = sorted(n for n, p in params.items() if n not in FRAMEWORK_ARGS
                     and p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD))
    for key, value in args.items():
        if key not in allowed:
            raise ValueError(f"{where}.{key}: unknown argument; allowed: {allowed}")
        ann = str(params[key].annotation).replace("typing.", "")
        ok = {"bool": isinstance(value, bool),
              "int": isinstance(value, int) and not isinstance(value, bool),
              "float": isinstance(value, (int, float)) and not isinstance(value, bool),
              "str": isinstance(value, str)}.get(ann, True)
        if not ok:
            raise ValueError(f"{where}.{key}: {value!r} not allowed; expected {ann}")


LOADERS: dict[str, Callable[..., TaskData]] = {
    **{t: _lra(t) for t in ("listops", "text", "retrieval", "image", "pathfinder", "pathx")},
    "speech_commands": _lazy(".speech_commands", "load_speech_commands"),
    "mnist": _lazy(".mnist", "load_mnist"),
    "scifar": _lazy(".scifar", "load_scifar"),
    "bidmc": _lazy(".bidmc", "load_bidmc"),
    "seq_shapes": _lazy(".seq_shapes", "load_seq_shapes"),
    "tones": _lazy(".tones", "load_tones"),
}

#: name -> fn(root, **kwargs) writing a dataset in its published layout under root.
PREPARERS: dict[str, Callable[..., Any]] = {
    "listops": _lazy(".lra.listops_gen", "generate_listops"),
    "pathfinder": _lazy(".lra.pathfinder_gen", "generate_pathfinder"),
    "imdb_standin": _lazy(".standins", "write_imdb_standin"),
    "aan_standin": _lazy(".standins", "write_aan_standin"),
    "cifar_standin": _lazy(".standins", "write_cifar_standin"),
    "seq_shapes": _lazy(".seq_shapes", "generate_seq_shapes"),  # made by the suite for S4D Table 3a's claim
    "speech_commands_standin": _lazy(".standins", "write_speech_commands_standin"),
    "mnist_standin": _lazy(".standins", "write_mnist_standin"),
    "bidmc_standin": _lazy(".standins", "write_bidmc_standin"),
    "tones": _lazy(".tones", "write_tones"),  # made by the suite for the resolution-change claim
}

#: preparers that make the papers' data by the papers' own procedure (not stand-ins)
GENERATORS = ("listops", "pathfinder")

#: generators whose output has changed since their first version: the version enters a prepared folder's record
#: and the task a checkpoint records, so data prepared, and cells trained, by an older version are refused
#: (pathfinder 2: the targets' growing tips may touch or cross, paddles are composited one by one, and the body and
#: far-end tests follow the original's blurred masks more closely; pathfinder 3: the original's algorithm throughout:
#: integer pixels and its rounding, its mask tests, drawing, markers and scaling, random labels)
GENERATOR_VERSIONS = {"pathfinder": 3}
