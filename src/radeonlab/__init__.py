"""radeonlab: a small LLM fine-tuning lab on AMD Radeon workstations (see README.md)."""
