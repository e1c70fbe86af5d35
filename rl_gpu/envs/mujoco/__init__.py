"""Robots on a real physics engine: MuJoCo's C engine stepping N worlds on a thread pool, with tasks
(observation, reward terms, termination, resets, commands) written in torch over the batched state.

- :mod:`~rl_gpu.envs.mujoco.engine`: :class:`MujocoEngine` (``mujoco.rollout``),
- :mod:`~rl_gpu.envs.mujoco.base`: :class:`MujocoEnv`, the task template,
- :mod:`~rl_gpu.envs.mujoco.randomization`: per-row physics (friction, masses, motor strength, damping),
- :mod:`~rl_gpu.envs.mujoco.locomotion`: Gymnasium's v5 locomotion tasks.

Needs the ``mujoco`` extra (``pip install 'rl-gpu[mujoco]'``); importing this package without it works, building
an environment raises a one-line ``ImportError``.
"""
