"""A submitted job, seen from the laptop: its state, logs, progress, results."""
