"""ipupod: the Python client of ipupodd, a simulated Graphcore IPU pod shared over gRPC.

Attach to IPUs, load an executable compiled with ``ipupod compile``, run it on numpy arrays
(or torch tensors), and hand work to the server as batch jobs::

    import numpy as np
    import ipupod

    client = ipupod.Client()          # $IPUPOD_SERVER or 127.0.0.1:50051; $IPUPOD_TOKEN
    print(client.pod_info().pod.name, "with", client.pod_info().pod.free_ipus, "IPUs free")

    with client.attach(ipus=1, wait=True,
                       on_position=lambda q: print("queued at", q.position)) as session:
        session.load("mlp.ipx")                       # uploaded unless the server has it
        outputs = session.infer({"x": np.zeros((8, 16), np.float32)})
        print(outputs["y"].shape)

    try:
        client.get_session("s1-99")
    except ipupod.RecoverableError as e:              # a device fault a reset clears
        print(e.recovery_action)
    except ipupod.Error as e:                         # everything else: code, message, ...
        print(e.code, e.message)

    [job] = client.submit("mlp.ipx", {"x": x})        # the server owns it from here
    job = client.wait_job(job.id)
    if ipupod.JobState(job.state) == ipupod.JobState.COMPLETED:
        outputs = client.job_tensors(job.id)

Errors follow PopTorch's model (``Error``, ``RecoverableError.recovery_action``,
``UnrecoverableError``) and keep the gRPC code. ``ipupod.testing`` is a pytest plugin that
starts a private ipupodd per test (fixture ``ipupod_server``). docs/python.md is the guide.
"""

from ipupod.client import DEFAULT_SERVER, FAULT_KINDS, Client
from ipupod.compiling import CompileResult
from ipupod.errors import RECOVERY_ACTIONS, Error, RecoverableError, UnrecoverableError
from ipupod.jobs import FINISHED_STATES, JobState
from ipupod.runs import RunProgress, RunResult, StepPlan, TrainResult
from ipupod.session import Session

__version__ = "0.1.0"

__all__ = [
    "Client",
    "CompileResult",
    "DEFAULT_SERVER",
    "Error",
    "FAULT_KINDS",
    "FINISHED_STATES",
    "JobState",
    "RECOVERY_ACTIONS",
    "RecoverableError",
    "RunProgress",
    "RunResult",
    "Session",
    "StepPlan",
    "TrainResult",
    "UnrecoverableError",
]
