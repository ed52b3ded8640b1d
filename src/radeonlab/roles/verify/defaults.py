"""The verify role's settings (role-prefixed data keys): the one place they are set."""

from __future__ import annotations

from typing import Any

from radeonlab.contract.records import HOST_RECORD_PATH

DEFAULTS: dict[str, Any] = {
    # The host record: the contract between provisioning and the job runner (CONTRACTS.md).
    "verify_record_path": HOST_RECORD_PATH,
    # The last stack check (check_stack.py's report) and the digest of what it depended on: a rerun whose
    # inputs are unchanged (roles/verify/facts.py StackCheckState) does not import torch again.
    "verify_check_state_path": "/etc/radeonlab/stack-check.json",
    # Run the stack check even when its inputs are unchanged (deploy/verify.py always does).
    "verify_recheck": False,
    # Side of the square matrices multiplied on each GPU (bf16, or fp16 on cards without bf16).
    "verify_matmul_size": 1024,
    # Print the per-host table at the end of the run.
    "verify_print_table": True,
}
