"""The tracker's client: ktune.Tracker makes the calls of proto/ktune.proto's
Tracker service as the ktune CLI makes them (the same SubmitJobRequest for
the same options, the same bearer token, TLS as the daemons serve it), and
ktune.Job follows one job."""
import json
import os
import secrets
import stat

import grpc

from . import _cli
from . import ktune_pb2 as pb
from . import ktune_pb2_grpc as pb_grpc
from ._errors import JobError, KtuneError, rpc_error

# Seconds one unary call may take (the CLI's --timeout default).
DEFAULT_TIMEOUT = 10.0
# Trials per task when no budget is given (ktune tune's default).
DEFAULT_TRIALS_PER_TASK = 64
# Measurement: the minimum time of one timed repeat (KT_JOB_DEFAULT_MIN_REPEAT_MS).
DEFAULT_MIN_REPEAT_MS = 100
# One message either way, as every ktune channel allows (KT_LIMIT_RPC_MESSAGE).
MAX_MESSAGE = 64 << 20

# UNAVAILABLE means the tracker was not reached: retried with backoff, as the
# C client does (5 attempts, 0.1 s doubling to 2 s).
_SERVICE_CONFIG = json.dumps({"methodConfig": [{
    "name": [{"service": "ktune.v1.Tracker"}],
    "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.1s", "maxBackoff": "2s",
                    "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]},
}]})


def read_token(path):
    """The token in a token file: its first line, whitespace stripped.

    As every ktune program does, a file that other users may read or write
    (mode & 0o077) is refused (PermissionError), and so is an empty one
    (ValueError)."""
    with open(path) as f:
        token = f.read().strip().split("\n", 1)[0].strip()
    if not token:
        raise ValueError("token file %s is empty" % path)
    mode = os.stat(path).st_mode
    if mode & 0o077:
        raise PermissionError("token file %s is accessible by other users (mode %04o); make "
                              "it private with: chmod 600 %s" % (path, stat.S_IMODE(mode), path))
    return token


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _workload_items(workloads):
    """(workload dict, weight, desc, key) of each item of the list `ktune tune
    --workload` reads: a workload, or {"workload": {...}, "weight": W}."""
    if isinstance(workloads, dict):
        workloads = [workloads]
    items = []
    for i, item in enumerate(workloads):
        if not isinstance(item, dict):
            raise TypeError("workload %d is a %s, not a dict" % (i, type(item).__name__))
        if "workload" not in item:
            items.append((item, 1.0, "", ""))
            continue
        weight = item.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
            raise ValueError("workload %d: weight must be a positive number, not %r"
                             % (i, weight))
        if not isinstance(item["workload"], dict):
            raise TypeError("workload %d: 'workload' is a %s, not a dict"
                            % (i, type(item["workload"]).__name__))
        items.append((item["workload"], float(weight), item.get("desc", ""),
                      item.get("key", "")))
    if not items:
        raise ValueError("no workload given")
    return items


class Tracker:
    """A connection to a ktune tracker at address ("host:port").

    token or token_file (default: the file $KT_TOKEN_FILE names) is the
    tracker's shared token, sent with every call as "authorization: Bearer
    TOKEN"; tls_ca (a PEM file) makes the channel TLS, verified against that
    CA, and tls_client_cert with tls_client_key present a client certificate
    to a tracker that requires one (mutual TLS, docs/security.md). timeout
    is each unary call's deadline in seconds.

    Failed calls raise ktune.KtuneError, of the subclass for the gRPC status
    (ktune.Unauthenticated, ktune.InvalidArgument, ...). A Tracker may be
    used as a context manager, which closes the channel.
    """

    def __init__(self, address, token_file=None, token=None, tls_ca=None,
                 tls_client_cert=None, tls_client_key=None, timeout=DEFAULT_TIMEOUT):
        if token is not None and token_file is not None:
            raise ValueError("give token or token_file, not both")
        if token is None:
            token_file = token_file or os.environ.get("KT_TOKEN_FILE") or None
            token = read_token(token_file) if token_file else None
        elif not token:
            raise ValueError("empty token")
        if (tls_client_cert is None) != (tls_client_key is None):
            raise ValueError("tls_client_cert and tls_client_key go together")
        if tls_client_cert is not None and tls_ca is None:
            raise ValueError("a client certificate needs tls_ca")
        self.address = address
        self.timeout = timeout
        self._metadata = (("authorization", "Bearer " + token),) if token else ()
        options = [("grpc.max_receive_message_length", MAX_MESSAGE),
                   ("grpc.max_send_message_length", MAX_MESSAGE),
                   ("grpc.service_config", _SERVICE_CONFIG)]
        if tls_ca is None:
            self._channel = grpc.insecure_channel(address, options)
        else:
            creds = grpc.ssl_channel_credentials(
                root_certificates=_read(tls_ca),
                private_key=_read(tls_client_key) if tls_client_key else None,
                certificate_chain=_read(tls_client_cert) if tls_client_cert else None)
            self._channel = grpc.secure_channel(address, creds, options)
        self._stub = pb_grpc.TrackerStub(self._channel)

    def close(self):
        """Close the channel."""
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "ktune.Tracker(%r)" % self.address

    # ---- calls ---------------------------------------------------------------------------

    def _call(self, method, request, timeout=None):
        try:
            return getattr(self._stub, method)(request, timeout=timeout or self.timeout,
                                                metadata=self._metadata)
        except grpc.RpcError as e:
            raise rpc_error(e, self.address) from None

    def _stream(self, method, request, timeout=None):
        call = getattr(self._stub, method)(request, timeout=timeout, metadata=self._metadata)
        try:
            yield from call
        except grpc.RpcError as e:
            raise rpc_error(e, self.address) from None
        finally:
            call.cancel()   # a no-op once the stream ended; else the reader left early

    # ---- the tracker ---------------------------------------------------------------------

    def health(self):
        """The tracker's HealthResponse (status "SERVING", version, role)."""
        return self._call("Health", pb.HealthRequest())

    def queue(self):
        """Its QueueStatusResponse: peers (runners and workers) and queues per key."""
        return self._call("QueueStatus", pb.QueueStatusRequest())

    def jobs(self, state=""):
        """Every job's JobProgress, or those in one state (queued, running,
        done, cancelled, failed)."""
        return list(self._call("ListJobs", pb.ListJobsRequest(state=state)).jobs)

    def job(self, job_id):
        """The Job of an id (no call is made)."""
        return Job(self, job_id)

    # ---- jobs ----------------------------------------------------------------------------

    def submit(self, *, network=None, network_file=None, onnx=None, workloads=None,
               trials=None, more=None, target="cpu", key=None, strategy="", policy="",
               search_params="", per_round=0, early_stopping=0, seed=0, priority=0,
               number=0, repeat=0, min_repeat_ms=None, run_timeout_ms=0, check=True,
               cache_flush=False, flush_weights=None, layout=None, batch=None, seq_len=None,
               inputs=None, winograd=None, ktune_cli=None, request_id=None):
        """Submit a tuning job and return its Job; the job runs whether or not
        anyone watches it.

        What to tune, one of: workloads (a workload dict or a list of them, or
        of {"workload": {...}, "weight": W}, the JSON `ktune tune --workload`
        reads), network (a built-in name), network_file, or onnx (a model
        file). A network is split into its tasks by `ktune tasks --json`
        (the partitioner is ktune's C code), with layout, batch, seq_len,
        inputs ({name: shape}) and winograd as `ktune tasks` takes them.

        The other options are `ktune tune`'s, with its defaults: trials
        (default 64 per task; stored trials of these tasks count) or more
        (trials beyond those stored), target ("cpu" or "cuda"), key (the
        runners' key; default the target), strategy, policy, search_params,
        per_round, early_stopping, seed, priority, and the measurement's
        number, repeat, min_repeat_ms, run_timeout_ms, check (compare with
        the reference kernel), cache_flush and flush_weights (default on
        for a network on a CPU without cache_flush).

        request_id names the submission (SubmitJobRequest.request_id; letters,
        digits and ._:-, at most 128): submit again with the same one (after
        a call that raised DeadlineExceeded or Unavailable, say) and the
        tracker answers the job it made the first time instead of making a
        second; the Job's `existing` then says so. Default: a random one,
        which the channel's own retries of this call reuse.
        """
        sources = [s for s in (network, network_file, onnx, workloads) if s is not None]
        if len(sources) != 1:
            raise ValueError("give one of network, network_file, onnx or workloads")
        if trials is not None and more is not None:
            raise ValueError("give trials (the total) or more (beyond what is stored), not both")
        is_net = workloads is None
        if not is_net and any(v is not None for v in (layout, batch, seq_len, inputs, winograd)):
            raise ValueError("layout, batch, seq_len, inputs and winograd apply to networks, "
                             "not to workloads")
        if is_net:
            # ktune tune leaves Winograd out of CUDA jobs unless asked.
            if winograd is None and target == "cuda":
                winograd = False
            items = _workload_items(_cli.network_tasks(
                network, network_file, onnx, layout, batch, seq_len, inputs, winograd,
                ktune_cli))
        else:
            items = _workload_items(workloads)

        if flush_weights is None:
            flush_weights = is_net and not cache_flush and target == "cpu"
        measure = pb.MeasureOptions(
            number=number, repeat=repeat or (3 if flush_weights or cache_flush else 0),
            min_repeat_ms=DEFAULT_MIN_REPEAT_MS if min_repeat_ms is None else min_repeat_ms,
            timeout_ms=run_timeout_ms, check_correctness=check,
            enable_cpu_cache_flush=cache_flush, flush_weights=flush_weights)
        if trials is None:
            trials = DEFAULT_TRIALS_PER_TASK * len(items)
        options = pb.TuningOptions(
            num_measure_trials=trials,
            more_trials=more or 0, num_measures_per_round=per_round,
            early_stopping=early_stopping, seed=seed, search_params=search_params,
            measure=measure)
        tasks = [pb.Task(workload=pb.Workload(key=k, json=json.dumps(w)), weight=weight,
                         desc=desc, target=target)
                 for w, weight, desc, k in items]
        job = pb.Job(tasks=tasks, target=target, runner_key=key or target, strategy=strategy,
                     policy=policy, priority=priority, options=options)
        if request_id is None:
            request_id = secrets.token_hex(16)
        r = self._call("SubmitJob", pb.SubmitJobRequest(job=job, request_id=request_id))
        return Job(self, r.job_id, notice=r.notice, stored_trials=r.stored_trials,
                   budget=r.budget, existing=r.existing)

    # ---- records -------------------------------------------------------------------------

    @staticmethod
    def _key(workload):
        # The tracker takes a workload's JSON where it takes a key.
        if isinstance(workload, dict):
            return json.dumps(workload, sort_keys=True)
        if not isinstance(workload, str):
            raise TypeError("workload is a key (str) or a workload dict, not a %s"
                            % type(workload).__name__)
        return workload

    def best(self, workload=None, *, job=None, target="", top_k=1, runner_key=""):
        """The best valid Records (lowest mean cost first) of one workload (its
        key as ktune prints it, or the workload dict) or of every task of a
        job (job: an id or a Job), top_k per workload; target: default cpu,
        or the job's own; runner_key: only records measured by runners of
        that device key (default: any)."""
        if (workload is None) == (job is None):
            raise ValueError("give a workload or a job (one of them)")
        req = pb.QueryBestRequest(target=target, top_k=top_k, runner_key=runner_key)
        if job is not None:
            req.job_id = getattr(job, "id", job)
        else:
            req.workload_key = self._key(workload)
        return list(self._call("QueryBest", req).records)

    def records(self, workload=None, *, job=None, target="", valid_only=False, timeout=None):
        """An iterator over the stored Records (the ListRecords stream) of a
        workload (key or dict), of a job (an id or a Job), or both;
        valid_only leaves out failed measurements."""
        req = pb.ListRecordsRequest(target=target, valid_only=valid_only)
        if job is not None:
            req.job_id = getattr(job, "id", job)
        if workload is not None:
            req.workload_key = self._key(workload)
        return self._stream("ListRecords", req, timeout)


class Job:
    """A job on a tracker: its id, and for a job just submitted the
    tracker's notice (e.g. that the store covers the budget already), the
    trials the store already held of its tasks, its budget, and whether the
    submission's request id named a job submitted before (existing)."""

    def __init__(self, tracker, job_id, notice="", stored_trials=0, budget=0, existing=False):
        self.tracker = tracker
        self.id = job_id
        self.notice = notice
        self.stored_trials = stored_trials
        self.budget = budget
        self.existing = existing

    def __repr__(self):
        return "ktune.Job(%d on %s)" % (self.id, self.tracker.address)

    def status(self):
        """Its JobProgress now: state, trials, each task's best latency, the
        task scheduler's table."""
        return self.tracker._call("JobStatus", pb.JobRef(job_id=self.id))

    def watch(self, timeout=None):
        """Yield a JobProgress after every round until the job ends (the last
        one has its final state). Leaving early does not stop the job."""
        return self.tracker._stream("WatchJob", pb.JobRef(job_id=self.id), timeout)

    def wait(self, timeout=None):
        """Follow the job to its end and return its last JobProgress; JobError
        when it failed or was cancelled, DeadlineExceeded past timeout
        seconds."""
        last = None
        for last in self.watch(timeout):
            pass
        if last is None:
            raise KtuneError(None, "the tracker sent no progress for job %d" % self.id)
        if last.state != "done":
            raise JobError(last)
        return last

    def cancel(self):
        """Stop the job (what it measured stays stored); its JobProgress."""
        return self.tracker._call("CancelJob", pb.JobRef(job_id=self.id))

    def best(self, top_k=1, target=""):
        """The best Records of each of its tasks (Tracker.best)."""
        return self.tracker.best(job=self.id, top_k=top_k, target=target)

    def records(self, valid_only=False, timeout=None):
        """An iterator over its Records (Tracker.records)."""
        return self.tracker.records(job=self.id, valid_only=valid_only, timeout=timeout)
