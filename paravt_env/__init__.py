"""ParaVT-Gym: long-video environments with parallel crop tools.

``import paravt_env`` registers ``ParaVT-LongVideo-v0`` with Gymnasium.
"""

from .questions import FAMILIES, Question
from .sources import (Episode, FileDataset, FileVideoSource, Frames, SyntheticDataset, SyntheticSource,
                      VideoError, DatasetError, VideoSource, load_dataset)
from .world import SyntheticVideo

__version__ = "0.1.0"
__all__ = ["FAMILIES", "Question", "Episode", "FileDataset", "FileVideoSource", "Frames", "SyntheticDataset",
           "SyntheticSource", "VideoError", "DatasetError", "VideoSource", "load_dataset", "SyntheticVideo",
           "parallel_env"]

import gymnasium as _gym

if "ParaVT-LongVideo-v0" not in _gym.registry:
    _gym.register(id="ParaVT-LongVideo-v0", entry_point="paravt_env.env:ParaVTLongVideoEnv")


def parallel_env(**kwargs):
    """The PettingZoo ParallelEnv twin of ``ParaVT-LongVideo-v0`` (main agent + sub-agents)."""
    from .multiagent import ParaVTParallelEnv

    return ParaVTParallelEnv(**kwargs)
