"""Training runs: the algorithm-agnostic runner, goals, evaluation, run directories, logging, signals."""
