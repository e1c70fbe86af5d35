"""Language models as policies: supervised warm start (``--algo sft``) and reinforcement learning from a task's
verifiable reward (``--algo grpo``, GRPO and RLOO) on text environments (:mod:`rl_gpu.envs.text`)."""
