"""Every dataset the training tables use, by name: loaders (published layouts) and preparers (generators,
stand-ins) that write such a layout into a directory of the suite's own."""
from __future__ import annotations

import inspect
from typing import Any, Callable

from ..specs.registry import Registry
from .base import TaskData

#: arguments the framework passes itself (the data root, the progress flag), never given in a spec
FRAMEWORK_ARGS = {"root", "data_dir", "out", "progress"}


def check_arguments(fn: Callable[..., Any], args: dict, where: str) -> None:
    """Raise ValueError naming ``where`` and the key for an argument that ``fn`` (a loader or preparer of this
    registry) does not take, or a value whose type its annotation (bool, int, float, str) rules out."""
    params = inspect.signature(fn).parameters
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


#: name -> fn(root, **kwargs) -> TaskData, reading a dataset's published layout under root (each module imported on
#: first use)
LOADERS: Registry[Callable[..., TaskData]] = Registry("loader")
for _name, _target in {
    "listops": "lra.listops:load_listops", "text": "lra.text:load_imdb", "retrieval": "lra.retrieval:load_aan",
    "image": "lra.image:load_lra_image", "pathfinder": "lra.pathfinder:load_pathfinder",
    "pathx": "lra.pathfinder:load_pathx", "speech_commands": "speech_commands:load_speech_commands",
    "mnist": "mnist:load_mnist", "scifar": "scifar:load_scifar", "bidmc": "bidmc:load_bidmc",
    "seq_shapes": "seq_shapes:load_seq_shapes", "tones": "tones:load_tones",
}.items():
    LOADERS.register_lazy(_name, f"{__package__}.{_target}")

#: name -> fn(root, **kwargs) writing a dataset in its published layout under root.
PREPARERS: Registry[Callable[..., Any]] = Registry("preparer")
for _name, _target in {
    "listops": "lra.listops_gen:generate_listops",
    "pathfinder": "lra.pathfinder_gen:generate_pathfinder",
    "imdb_standin": "standins:write_imdb_standin",
    "aan_standin": "standins:write_aan_standin",
    "cifar_standin": "standins:write_cifar_standin",
    "seq_shapes": "seq_shapes:generate_seq_shapes",  # made by the suite for S4D Table 3a's claim
    "speech_commands_standin": "standins:write_speech_commands_standin",
    "mnist_standin": "standins:write_mnist_standin",
    "bidmc_standin": "standins:write_bidmc_standin",
    "tones": "tones:write_tones",  # made by the suite for the resolution-change claim
}.items():
    PREPARERS.register_lazy(_name, f"{__package__}.{_target}")

#: preparers that make the papers' data by the papers' own procedure (not stand-ins)
GENERATORS = ("listops", "pathfinder")

#: generators whose output has changed since their first version: the version enters a prepared folder's record
#: and the task a checkpoint records, so data prepared, and cells trained, by an older version are refused
#: (pathfinder 2: the targets' growing tips may touch or cross, paddles are composited one by one, and the body and
#: far-end tests follow the original's blurred masks more closely; pathfinder 3: the original's algorithm throughout:
#: integer pixels and its rounding, its mask tests, drawing, markers and scaling, random labels)
GENERATOR_VERSIONS = {"pathfinder": 3}
