"""Deciding what a job will be (hosts, GPUs, precision, rendered config): nothing is sent."""
