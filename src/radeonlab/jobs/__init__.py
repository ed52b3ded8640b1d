"""radeonlab's job runner: the laptop side that checks, uploads, launches, watches and fetches jobs.

The life of a job: spec -> checks -> render -> upload -> launch -> watch -> remedies -> fetch.
"""
