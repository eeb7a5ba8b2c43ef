"""The exceptions of the ktune client: the gRPC status of a call the tracker
refused or that failed, and a job that ended without finishing."""
import grpc


class KtuneError(Exception):
    """A ktune operation failed.

    code: the call's grpc.StatusCode, or None when no call was involved (a
    network the ktune program could not read, a compiler error, a failed
    run). message: the cause as ktune gave it.
    """

    def __init__(self, code, message):
        super().__init__(message if code is None else "%s: %s" % (code.name, message))
        self.code = code
        self.message = message


class Unauthenticated(KtuneError):
    """UNAUTHENTICATED: the token is missing or wrong."""


class InvalidArgument(KtuneError):
    """INVALID_ARGUMENT: a bad workload, option or filter."""


class NotFound(KtuneError):
    """NOT_FOUND: no such job."""


class Unavailable(KtuneError):
    """UNAVAILABLE: the tracker could not be reached."""


class DeadlineExceeded(KtuneError):
    """DEADLINE_EXCEEDED: no answer within the call's timeout."""


class ResourceExhausted(KtuneError):
    """RESOURCE_EXHAUSTED: past one of the tracker's limits (docs/security.md)."""


class JobError(KtuneError):
    """A job ended failed or cancelled; progress is its last JobProgress."""

    def __init__(self, progress):
        why = ": " + progress.message if progress.message else ""
        super().__init__(None, "job %d %s%s" % (progress.job_id, progress.state, why))
        self.progress = progress


_BY_CODE = {
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
}


def rpc_error(err, address):
    """The KtuneError (of the subclass for its status) for a grpc.RpcError."""
    code, details = err.code(), err.details() or ""
    if code == grpc.StatusCode.UNAVAILABLE:
        details = "cannot reach the tracker at %s (%s)" % (address, details)
    elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
        details = "the tracker at %s did not answer in time" % address
    return _BY_CODE.get(code, KtuneError)(code, details)
