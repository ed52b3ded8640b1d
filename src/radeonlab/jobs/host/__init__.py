"""What runs on a workstation, shipped as files (jobs/ssh/hostcode.py) and run as `python3 -m
radeonlab.jobs.host.<tool>`.

Two kinds of tool. Most run on the host's system python3 and use the standard library only: they must work
on a host whose venv is broken or missing (probe, stage, launcher, supervisor, stream, ...). The VENV_TOOLS
import the training stack (transformers, peft, huggingface_hub, apprise, llamafactory) and are run by the
training venv's python.
"""

VENV_TOOLS = frozenset({"tryout", "models", "modelpeer", "notify_send", "export", "chat"})
