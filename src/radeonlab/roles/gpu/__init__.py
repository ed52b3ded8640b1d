"""GPU detection: which AMD GPUs a host has, what they are, and what ROCm needs to use them."""
