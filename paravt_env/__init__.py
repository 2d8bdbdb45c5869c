"""ParaVT-Gym: long-video environments with parallel crop tools.

``import paravt_env`` registers ``ParaVT-LongVideo-v0`` with Gymnasium.
"""

from .questions import FAMILIES, Question
from .sources import (Episode, FileDataset, FileVideoSource, Frames, SyntheticDataset, SyntheticSource,
                      VideoError, DatasetError, VideoSource, load_dataset)
from .world import SyntheticVideo

__version__ = "0.1.0"
