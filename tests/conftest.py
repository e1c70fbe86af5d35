import torch

# One intra-op thread, as the Makefile sets: the suite is small tensors, and extra threads only contend.
torch.set_num_threads(1)
