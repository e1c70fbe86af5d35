"""How work runs: compilation and CUDA graphs, checkpoint files, the process group, the machine's census."""
