"""The stage request and answer (contract/messages.py) survive the trip through JSON unchanged, and a request
missing its optional parts reads as the defaults the host acts on."""

from __future__ import annotations

import json

from radeonlab.contract.messages import START_WAIT_S, BlobLink, LaunchOptions, StageAnswer, StageRequest
from radeonlab.contract.records import StateRecord
from radeonlab.contract.state import JobState


def test_a_stage_request_reads_back_as_it_was_written() -> None:
    request = StageRequest(
        "/home/lab/radeonlab/jobs/demo-1",
        blobs="/home/lab/radeonlab/blobs",
        links=[BlobLink("ab" * 32, "data/demo.json")],
        files={"config.yaml": "model_name_or_path: m\n"},
        code="radeonlab/code/0123",
        job={"id": "demo-1", "nodes": {"rank": 1, "peers": [{"rank": 0, "host": "ws1"}]}},
        secret={"HF_TOKEN": "hf_x"},
        launch=LaunchOptions("/opt/venv", allow_shared=True, queue=False, resume=True, resume_max_step=40),
        wait_s=3.5,
    )
    assert StageRequest.from_dict(json.loads(request.to_json())) == request


def test_a_bare_request_stages_nothing_and_starts_nothing() -> None:
    bare = StageRequest.from_dict({"job_dir": "/j"})
    assert (bare.links, bare.files, bare.code, bare.job) == ([], {}, "", None)
    assert (bare.secret, bare.launch, bare.wait_s) == (None, None, START_WAIT_S)
    launch = StageRequest.from_dict({"job_dir": "/j", "launch": {"venv": "/v"}}).launch
    assert launch == LaunchOptions("/v", allow_shared=False, queue=True, resume=False, resume_max_step=None)


def test_the_answer_reads_back_and_an_empty_state_is_queued() -> None:
    answer = StageAnswer(StateRecord(JobState.RUNNING, pid=41, attempt=2), alive=True)
    assert StageAnswer.from_dict(json.loads(answer.to_json())) == answer
    assert StageAnswer.from_dict({"state": {}}) == StageAnswer(StateRecord(JobState.QUEUED), None)
