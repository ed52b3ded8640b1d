"""Example job specs (demo.yaml, seed.yaml): data, installed as radeonlab.jobs.examples."""
