"""The scheduler seam (issue 24 item 4): the `Scheduler` protocol (base.py), the built-in per-GPU queue
(queue.py) and Slurm (slurm.py) as its implementations, chosen once (choose.py). Adding a scheduler is one
module here and one line of choose.py; no other module asks which scheduler is in use."""
