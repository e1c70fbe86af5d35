"""The bottom layer: types and protocols every other package speaks, pytrees, seeding, devices, errors.

Imports nothing of rl_gpu.
"""
