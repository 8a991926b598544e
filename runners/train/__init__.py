"""Training machinery shared by every training table: config, loop, schedules, checkpoints, DDP.

    from runners.train import TrainConfig, train
"""
from .checkpoint import CheckpointMismatch
from .config import TrainConfig
from .loop import TrainResult, evaluate, train
from .schedule import LRSchedule

__all__ = ["CheckpointMismatch", "LRSchedule", "TrainConfig", "TrainResult", "evaluate", "train"]
