"""pyinfra deploy files (run them with pyinfra; they are installed as radeonlab.deploy so the sandbox finds
them)."""
