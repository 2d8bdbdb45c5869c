"""LMM agents: one policy interface (agents.lmm.policy) over the tiny Qwen2.5-VL built here
(agents.lmm.tiny_qwen, agents.lmm.tokenizer) and any local Hugging Face Qwen-VL checkpoint; the
policy as the env's sub-agent (agents.lmm.subagent.Subagent)."""

from agents.lmm.policy import DEFAULT_PREFIX, DEFAULT_STOP, Completion, Conversation, LMMPolicy, TransformersPolicy
from agents.lmm.subagent import Subagent
from agents.lmm.tiny_qwen import build_image_processor, build_tiny_model, load_checkpoint, save_checkpoint
from agents.lmm.tokenizer import add_structural_tokens, build_tokenizer, check_tokenizer

__all__ = [
    "Completion", "Conversation", "LMMPolicy", "TransformersPolicy", "Subagent", "DEFAULT_PREFIX", "DEFAULT_STOP",
    "build_tokenizer", "check_tokenizer", "add_structural_tokens",
    "build_tiny_model", "build_image_processor", "save_checkpoint", "load_checkpoint",
]
