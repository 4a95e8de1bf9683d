import torch

# Keep the policy tests light on this shared machine.
torch.set_num_threads(1)
