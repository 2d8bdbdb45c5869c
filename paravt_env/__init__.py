"""ParaVT-Gym: long-video environments with parallel crop tools.

``import paravt_env`` registers ``ParaVT-LongVideo-v0`` with Gymnasium. Its settings and their defaults:
``paravt_env.config`` (``EnvConfig``, ``DEFAULTS``).
"""

from .config import DEFAULTS, ENTRY_POINT, ENV_ID, GATING_BUDGETS, EnvConfig
from .questions import FAMILIES, Question
from .sources import (Episode, FileDataset, FileVideoSource, Frames, SyntheticDataset, SyntheticSource,
                      VideoError, DatasetError, VideoSource, load_dataset)
from .world import SyntheticVideo

__version__ = "0.1.0"
__all__ = ["EnvConfig", "DEFAULTS", "ENV_ID", "GATING_BUDGETS", "FAMILIES", "Question", "Episode", "FileDataset",
           "FileVideoSource", "Frames", "SyntheticDataset", "SyntheticSource", "VideoError", "DatasetError",
           "VideoSource", "load_dataset", "SyntheticVideo", "parallel_env"]

import gymnasium as _gym

if ENV_ID not in _gym.registry:
    _gym.register(id=ENV_ID, entry_point=ENTRY_POINT)


def parallel_env(**kwargs):
    """The PettingZoo ParallelEnv twin of ``ParaVT-LongVideo-v0`` (main agent + sub-agents); the same
    keyword arguments and defaults (``DEFAULTS``)."""
    from .multiagent import ParaVTParallelEnv

    return ParaVTParallelEnv(**kwargs)
