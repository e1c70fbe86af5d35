"""The command line: ``rl-gpu {train,evaluate,plot,export,bench}``, typed flags, per-environment presets."""
