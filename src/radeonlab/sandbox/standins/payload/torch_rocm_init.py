"""SIMULATED stand-in for AMD's torch/_rocm_init.py (radeonlab sandbox): torch/__init__.py calls
initialize() at import when this module is in the wheel; AMD's preloads ROCm's libraries through rocm_sdk."""

ROCM_VERSION = "0.0.0"  # set to the release by radeonlab/sandbox/amdwheels.py when the wheel is made
PRELOAD = ["amd_comgr", "amdhip64", "miopen", "hipdnn"]  # the names amdworld/python-packages.yaml quotes


def initialize():
    import rocm_sdk

    rocm_sdk.initialize_process(preload_shortnames=PRELOAD, check_version=ROCM_VERSION)
