"""Robots on a real physics engine: MuJoCo's C engine stepping N worlds on a thread pool, with tasks
(observation, reward terms, termination, resets, commands) written in torch over the batched state.

- :mod:`~rl_gpu.envs.mujoco.engine`: :class:`MujocoEngine` (``mujoco.rollout``),
- :mod:`~rl_gpu.envs.mujoco.base`: :class:`MujocoEnv`, the task template,
- :mod:`~rl_gpu.envs.mujoco.randomization`: per-row physics (friction, masses, motor strength, damping),
- :mod:`~rl_gpu.envs.mujoco.locomotion`: Gymnasium's v5 locomotion tasks.
- :mod:`~rl_gpu.envs.mujoco.render`: frames of a row from a tracking camera (MuJoCo's offscreen renderer).

Needs the ``mujoco`` extra (``pip install 'rl-gpu[mujoco]'``); importing this package without it works, building
an environment raises a one-line ``ImportError``.
"""

from rl_gpu.envs.mujoco.gl import prefer_headless_gl

# Before any module of this package imports mujoco, which picks its OpenGL platform once (see gl.py).
prefer_headless_gl()
