"""Carrying a plan out: uploads, the job folder, the launch."""
