"""ktune from Python (docs/python.md).

- Tracker: a client of a ktune tracker (submit, watch and query jobs over
  gRPC); Job: one job on it.
- Network: a network `ktune build` wrote, run on NumPy arrays.
- KtuneError and its subclasses per gRPC status; JobError.
- pb: the wire API's messages (proto/ktune.proto), generated when the
  package was built.
"""
from . import ktune_pb2 as pb
from ._cli import network_tasks, workload_key
from ._errors import (DeadlineExceeded, InvalidArgument, JobError, KtuneError, NotFound,
                      ResourceExhausted, Unauthenticated, Unavailable)
from ._network import Input, Network
from ._tracker import Job, Tracker, read_token

__version__ = "0.1.0"

__all__ = ["Tracker", "Job", "Network", "Input", "KtuneError", "Unauthenticated",
           "InvalidArgument", "NotFound", "Unavailable", "DeadlineExceeded",
           "ResourceExhausted", "JobError", "read_token", "network_tasks", "workload_key", "pb"]
