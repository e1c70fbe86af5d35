"""rl_gpu seen from outside and taken outside: Gymnasium and Stable-Baselines3 vector environments, loading a
checkpoint's policy, exporting it as ONNX or TorchScript."""
