import torch

# MuJoCo picks its OpenGL platform when first imported: let rl_gpu choose a headless one (EGL, OSMesa) before any
# test imports mujoco or Gymnasium's MuJoCo tasks, so that the video tests render wherever they run.
import rl_gpu.envs.mujoco  # noqa: F401,E402

# One intra-op thread, as the Makefile sets: the suite is small tensors, and extra threads only contend.
torch.set_num_threads(1)
