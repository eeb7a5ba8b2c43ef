"""The ktune Python package (python/) against this build: a tracker, a worker
and a runner started on loopback with a token, a small job submitted,
watched and queried from Python, and networks `ktune build` wrote run from
NumPy against `ktune run`'s output.

Run by tests/python/run_tests.py (meson test 'python') inside a venv where
the package is installed, with KT_BUILD_ROOT and KT_SOURCE_ROOT set; plain
unittest works too: python -m unittest test_ktune.
"""
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

import grpc
import numpy as np

import ktune

BUILD = os.environ["KT_BUILD_ROOT"]
SOURCE = os.environ["KT_SOURCE_ROOT"]
CLI = os.path.join(BUILD, "cli", "ktune")
BLOCK = os.path.join(SOURCE, "tests", "net", "block.json")
MATMUL = {"op": "matmul", "M": 16, "N": 16, "K": 16}
# How long the daemons get to start and register, and to stop.
START_S, STOP_S = 60, 20


def ktune_cli(*args, cwd=None):
    """Run the build's ktune; its standard output (a failure fails the test)."""
    p = subprocess.run([CLI] + list(args), cwd=cwd, capture_output=True, text=True)
    if p.returncode != 0:
        raise AssertionError("ktune %s: exit %d: %s" % (" ".join(args), p.returncode, p.stderr))
    return p.stdout


class Cluster:
    """ktune-tracker, ktune-worker and ktune-runner of the build on
    127.0.0.1 with a fresh token, their files in a private directory; with
    peers=False the tracker alone, with tls(dir) giving its TLS options."""

    def __init__(self, peers=True, tls=None):
        self.dir = tempfile.mkdtemp(prefix="ktune-python-")
        self.token = secrets.token_hex(24)
        self.token_file = os.path.join(self.dir, "token")
        fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, (self.token + "\n").encode())
        os.close(fd)
        self.procs = []
        try:
            self._start(peers, tls(self.dir) if tls else [])
        except BaseException:
            self.stop()
            raise

    def _spawn(self, name, binary, *args):
        log = open(os.path.join(self.dir, name + ".log"), "w")
        env = dict(os.environ, TMPDIR=self.dir)
        p = subprocess.Popen([os.path.join(BUILD, binary)] + list(args), stdout=log,
                             stderr=subprocess.STDOUT, env=env)
        log.close()
        self.procs.append((name, p))
        return p

    def log_tail(self, name):
        with open(os.path.join(self.dir, name + ".log"), errors="replace") as f:
            return "".join(f.readlines()[-10:])

    def _start(self, peers, tracker_args):
        port_file = os.path.join(self.dir, "tracker.addr")
        tracker = self._spawn("tracker", "tracker/ktune-tracker", "--listen", "127.0.0.1:0",
                              "--http", "off", "--db", os.path.join(self.dir, "ktune.db"),
                              "--port-file", port_file, "--token-file", self.token_file,
                              "--heartbeat-ms", "1000", *tracker_args)
        deadline = time.monotonic() + START_S
        self.address = ""
        while not self.address:
            if tracker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the tracker did not start:\n" + self.log_tail("tracker"))
            time.sleep(0.05)
            if os.path.exists(port_file):
                with open(port_file) as f:
                    self.address = f.read().strip()
        if not peers:
            return
        common = ["--tracker", self.address, "--listen", "127.0.0.1:0",
                  "--token-file", self.token_file]
        self._spawn("worker", "worker/ktune-worker", *common)
        self._spawn("runner", "server/ktune-runner", *common, "--key", "cpu", "--device", "cpu",
                    "--drain-ms", "5000")
        with ktune.Tracker(self.address, token_file=self.token_file) as t:
            while True:
                roles = {p.role for p in t.queue().peers}
                if {"runner", "worker"} <= roles:
                    return
                for name, p in self.procs:
                    if p.poll() is not None:
                        raise RuntimeError("the %s exited:\n%s" % (name, self.log_tail(name)))
                if time.monotonic() > deadline:
                    raise RuntimeError("the runner and worker did not register")
                time.sleep(0.1)

    def stop(self):
        """SIGTERM to each (the tracker first, as ktune tune stops them), then
        SIGKILL to any left after STOP_S; the directory goes."""
        for _, p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for _, p in self.procs:
            try:
                p.wait(STOP_S)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class TrackerTest(unittest.TestCase):
    """ktune.Tracker and ktune.Job against a live tracker."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster()
        cls.tracker = ktune.Tracker(cls.cluster.address, token_file=cls.cluster.token_file)

    @classmethod
    def tearDownClass(cls):
        cls.tracker.close()
        cls.cluster.stop()

    def test_health_and_queue_name_the_tracker_and_its_peers(self):
        h = self.tracker.health()
        self.assertEqual((h.status, h.role), ("SERVING", "tracker"))
        q = self.tracker.queue()
        runners = [p for p in q.peers if p.role == "runner"]
        self.assertEqual([p.key for p in runners], ["cpu"])
        self.assertIn("cpu", [x.key for x in q.queues])

    def test_job_is_watched_to_done_and_its_records_are_queried(self):
        job = self.tracker.submit(workloads=[MATMUL], trials=4, per_round=4, seed=1)
        self.assertGreater(job.id, 0)
        rows = list(job.watch(timeout=120))
        self.assertTrue(rows, "WatchJob sent nothing")
        self.assertTrue(all(r.job_id == job.id for r in rows))
        last = rows[-1]
        self.assertEqual(last.state, "done", last.message)
        self.assertGreaterEqual(last.total_trials, 4)
        self.assertEqual(job.wait().state, "done")   # a finished job's stream ends at once

        status = job.status()
        self.assertEqual(status.budget, 4)
        self.assertEqual(len(status.tasks), 1)
        # What proposed the best: a fresh store's first round is random sampling.
        self.assertIn(status.tasks[0].best_origin, ("random", "model", "sibling"))
        key = status.tasks[0].workload_key
        self.assertEqual(key, ktune.workload_key(MATMUL, cli=CLI))

        best = job.best()
        self.assertEqual(len(best), 1)
        self.assertEqual((best[0].workload_key, best[0].job_id), (key, job.id))
        self.assertGreater(best[0].mean_cost, 0)
        # The same record by the workload's key and by the workload itself.
        self.assertEqual([r.id for r in self.tracker.best(key)], [best[0].id])
        self.assertEqual([r.id for r in self.tracker.best(MATMUL)], [best[0].id])
        # Only the records of runners of a key: the runner's, and one no runner has.
        self.assertEqual([r.id for r in self.tracker.best(key, runner_key="cpu")], [best[0].id])
        self.assertEqual(self.tracker.best(key, runner_key="nobody"), [])

        records = list(job.records())
        self.assertEqual(len(records), status.total_trials)
        self.assertTrue(all(r.job_id == job.id and r.workload_key == key for r in records))
        valid = list(self.tracker.records(key, valid_only=True))
        self.assertTrue(valid)
        self.assertTrue(all(r.error_code == ktune.pb.NO_ERROR for r in valid))
        self.assertEqual(min(r.mean_cost for r in valid), best[0].mean_cost)

    def test_network_file_is_submitted_as_its_tasks_and_cancelled(self):
        tasks = ktune.network_tasks(network_file=BLOCK, cli=CLI)
        job = self.tracker.submit(network_file=BLOCK, trials=4000, ktune_cli=CLI)
        self.assertEqual([t.workload_key for t in job.status().tasks],
                         [t["key"] for t in tasks])
        self.assertEqual(job.status().budget, 4000)
        job.cancel()
        with self.assertRaises(ktune.JobError) as e:
            job.wait(timeout=60)
        self.assertEqual(e.exception.progress.state, "cancelled")

    def test_a_request_id_submitted_again_answers_the_same_job(self):
        # The retry of a submission whose answer was lost: no second job.
        # On a key no runner has, the jobs wait and are cancelled at once.
        wl = {"op": "matmul", "M": 8, "N": 8, "K": 24}
        rid = "py-" + secrets.token_hex(8)
        opts = dict(workloads=[wl], trials=4000, key="nobody")
        first = self.tracker.submit(request_id=rid, **opts)
        again = self.tracker.submit(request_id=rid, **opts)
        self.assertEqual(again.id, first.id)
        self.assertEqual((first.existing, again.existing), (False, True))
        self.assertIn("submitted before", again.notice)
        # Without one (a random id per call), every submission is a job.
        other = self.tracker.submit(**opts)
        self.assertNotEqual(other.id, first.id)
        self.assertFalse(other.existing)
        # The same id for another job is refused, naming the job it names.
        with self.assertRaises(ktune.InvalidArgument) as e:
            self.tracker.submit(request_id=rid, **dict(opts, trials=4001))
        self.assertIn("job %d" % first.id, str(e.exception))
        for job in (first, other):
            job.cancel()

    def test_wrong_or_missing_token_is_unauthenticated(self):
        for token in ("wrong-" + self.cluster.token, None):
            with ktune.Tracker(self.cluster.address, token=token) as t:
                with self.assertRaises(ktune.Unauthenticated) as e:
                    t.health()
                self.assertEqual(e.exception.code, grpc.StatusCode.UNAUTHENTICATED)
                # A stream's refusal is the same exception.
                with self.assertRaises(ktune.Unauthenticated):
                    list(t.records(job=1))

    def test_bad_workload_is_invalid_argument(self):
        # Refused by the tracker's parse of the workload on SubmitJob.
        for bad, says in (({"op": "matmul", "M": 0, "N": 16, "K": 16}, "'M'"),
                          ({"op": "no_such_op"}, "no_such_op")):
            with self.assertRaises(ktune.InvalidArgument) as e:
                self.tracker.submit(workloads=[MATMUL, {"workload": bad, "weight": 2}],
                                    trials=8)
            self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
            self.assertIn("task 1", e.exception.message)
            self.assertIn(says, e.exception.message)
        # Refused here, before any call.
        with self.assertRaises(TypeError):
            self.tracker.submit(workloads=["matmul"])
        with self.assertRaises(ValueError):
            self.tracker.submit(workloads=[{"workload": MATMUL, "weight": -1}])
        with self.assertRaises(ValueError):
            ktune.workload_key({"op": "matmul", "M": 16}, cli=CLI)
        # QueryBest and ListRecords: a typo in a key or a bad workload dict
        # is INVALID_ARGUMENT naming the field, not "no records".
        for bad in ("garbage", '["abc", 5]', {"op": "matmul", "M": 16}):
            with self.assertRaises(ktune.InvalidArgument) as e:
                self.tracker.best(bad)
            self.assertIn("workload_key", e.exception.message)
            with self.assertRaises(ktune.InvalidArgument):
                list(self.tracker.records(bad))
        with self.assertRaises(ktune.InvalidArgument) as e:
            self.tracker.best(MATMUL, runner_key="no key")
        self.assertIn("runner_key", e.exception.message)

    def test_unknown_job_is_not_found(self):
        with self.assertRaises(ktune.NotFound):
            self.tracker.job(999999).status()


def openssl(d, *args):
    subprocess.run(["openssl"] + list(args), cwd=d, check=True, capture_output=True)


def certificates(d):
    """A CA, and the certificates it signs for the tracker (127.0.0.1) and a
    client (EC P-256, as tests/kt_test_tls.h makes them); the tracker's TLS
    options with the CA required of callers."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl(d, "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=ktune-test-ca")
    for name in ("tracker", "client"):
        openssl(d, "req", *ec, "-keyout", name + ".key", "-out", name + ".csr",
                "-subj", "/CN=" + name)
        with open(os.path.join(d, name + ".ext"), "w") as f:
            f.write("subjectAltName=IP:127.0.0.1\n")
        openssl(d, "x509", "-req", "-in", name + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-extfile", name + ".ext", "-out", name + ".pem")
        os.chmod(os.path.join(d, name + ".key"), 0o600)
    return ["--tls-cert", os.path.join(d, "tracker.pem"),
            "--tls-key", os.path.join(d, "tracker.key"),
            "--tls-client-ca", os.path.join(d, "ca.pem")]


class TlsTest(unittest.TestCase):
    """A tracker serving mutual TLS with a token, as docs/security.md sets
    one up."""

    @classmethod
    def setUpClass(cls):
        cls.cluster = Cluster(peers=False, tls=certificates)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def tracker(self, **tls):
        return ktune.Tracker(self.cluster.address, token_file=self.cluster.token_file,
                             timeout=5, **tls)

    def test_mutual_tls_tracker_serves_a_client_with_its_certificate_only(self):
        d = self.cluster.dir
        ca = os.path.join(d, "ca.pem")
        me = dict(tls_client_cert=os.path.join(d, "client.pem"),
                  tls_client_key=os.path.join(d, "client.key"))
        with self.tracker(tls_ca=ca, **me) as t:
            self.assertEqual(t.health().status, "SERVING")
        for refused in (dict(tls_ca=ca), {}):   # no client certificate; no TLS at all
            with self.tracker(**refused) as t:
                with self.assertRaises(ktune.Unavailable):
                    t.health()
        with self.assertRaises(ValueError):
            self.tracker(**me)   # a client certificate without tls_ca


class LocalTest(unittest.TestCase):
    """What the client checks without a tracker."""

    def test_token_file_readable_by_others_or_empty_is_refused(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "token")
            with open(path, "w") as f:
                f.write("  secret \nsecond line\n")
            os.chmod(path, 0o600)
            self.assertEqual(ktune.read_token(path), "secret")
            os.chmod(path, 0o640)
            with self.assertRaises(PermissionError) as e:
                ktune.Tracker("127.0.0.1:1", token_file=path)
            self.assertIn("chmod 600", str(e.exception))
            with open(path, "w") as f:
                f.write("\n")
            os.chmod(path, 0o600)
            with self.assertRaises(ValueError):
                ktune.read_token(path)

    def test_unreachable_tracker_is_unavailable(self):
        # A port bound but not listening: every connection is refused.
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            address = "127.0.0.1:%d" % s.getsockname()[1]
            with ktune.Tracker(address, token="t", timeout=5) as t:
                with self.assertRaises(ktune.Unavailable) as e:
                    t.health()
        self.assertIn("cannot reach the tracker at " + address, e.exception.message)


def tiny_onnx(path):
    """An ONNX model of two inputs, token ids (int64) and a float tensor:
    relu((embedding[ids] + x) @ w + b)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    weights = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
               for n, s in (("emb", (16, 8)), ("w", (8, 6)), ("b", (6,)))]
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["e"], axis=0),
             helper.make_node("Add", ["e", "x"], ["h"]),
             helper.make_node("MatMul", ["h", "w"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["mb"]),
             helper.make_node("Relu", ["mb"], ["y"])]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 4]),
                        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


class NetworkTest(unittest.TestCase):
    """ktune.Network on networks `ktune build` wrote (no store: every task
    with its default schedule), against `ktune run --output` on the same
    inputs."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="ktune-python-net-")
        d = cls.dir
        rng = np.random.default_rng(5)
        tiny_onnx(os.path.join(d, "tiny.onnx"))
        cls.ids = rng.integers(0, 16, (1, 4)).astype(np.int64)
        cls.x = rng.standard_normal((1, 4, 8)).astype(np.float32)
        cls.xb = rng.standard_normal((1, 12, 64)).astype(np.float32)
        np.save(os.path.join(d, "ids.npy"), cls.ids)
        np.save(os.path.join(d, "x.npy"), cls.x)
        np.save(os.path.join(d, "xb.npy"), cls.xb)
        for net, lib in ((["--onnx", "tiny.onnx"], "tiny"), (["--network-file", BLOCK], "block")):
            os.mkdir(os.path.join(d, lib))
            ktune_cli("build", *net, "--out", lib, cwd=d)
        ktune_cli("run", "--onnx", "tiny.onnx", "--input", "ids=ids.npy", "--input", "x=x.npy",
                  "--output", "tiny.npy", "--repeat", "1", cwd=d)
        ktune_cli("run", "--network-file", BLOCK, "--input", "xb.npy", "--output", "block.npy",
                  "--repeat", "1", cwd=d)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def assert_close(self, got, want):
        self.assertEqual((got.dtype, got.shape), (np.float32, want.shape))
        self.assertGreater(float(np.abs(want).max()), 0)
        # The same source compiled with the header's build line, which is
        # ktune run's: the same numbers, bit for bit.
        np.testing.assert_array_equal(got, want)

    def test_two_input_onnx_network_equals_ktune_run(self):
        lib = os.path.join(self.dir, "tiny")
        self.assertFalse(os.path.exists(os.path.join(lib, "tiny.so")))
        with ktune.Network(lib) as net:
            self.assertTrue(os.path.exists(os.path.join(lib, "tiny.so")))   # from the build line
            self.assertEqual([(i.name, i.shape, i.dtype) for i in net.inputs],
                             [("ids", (1, 4), "int"), ("x", (1, 4, 8), "float32")])
            self.assertEqual(net.output_shape, (1, 4, 6))
            want = np.load(os.path.join(self.dir, "tiny.npy"))
            y = net.run(ids=self.ids, x=self.x)
            self.assert_close(y, want)
            np.testing.assert_array_equal(net.run(self.ids, self.x), y)
            np.testing.assert_array_equal(net.run({"x": self.x, "ids": self.ids}), y)
            # Token ids as int32 or as float values are the same ids.
            np.testing.assert_array_equal(net.run(self.ids.astype(np.int32), self.x), y)
            np.testing.assert_array_equal(net.run(self.ids.astype(np.float32), self.x), y)
        # A second load takes the library already compiled.
        with ktune.Network(lib, name="tiny") as again:
            np.testing.assert_array_equal(again.run(self.ids, self.x), y)

    def test_network_file_equals_ktune_run_timed_and_threaded(self):
        net = ktune.Network(os.path.join(self.dir, "block"))
        want = np.load(os.path.join(self.dir, "block.npy"))
        self.assert_close(net.run(self.xb), want)
        y, seconds = net.run_timed(self.xb)
        self.assert_close(y, want)
        self.assertEqual(len(seconds), len(net.steps))
        self.assertTrue(all(s >= 0 for s in seconds) and seconds.sum() > 0)
        self.assertTrue(any(task >= 0 for _, task in net.steps))
        net.threads = 2
        self.assert_close(net.run(self.xb.astype(np.float64)), want)
        with self.assertRaises(ValueError):
            net.threads = 0
        net.close()
        with self.assertRaises(ktune.KtuneError):
            net.run(self.xb)

    def test_wrong_inputs_are_refused_naming_expected_and_got(self):
        with ktune.Network(os.path.join(self.dir, "tiny")) as net:
            with self.assertRaises(ValueError) as e:
                net.run(self.ids, self.x[:, :3])
            self.assertIn("'x' has shape (1, 4, 8), got (1, 3, 8)", str(e.exception))
            with self.assertRaises(TypeError) as e:
                net.run(self.ids, self.x.astype(np.int64))
            self.assertIn("'x' is float32, got int64", str(e.exception))
            with self.assertRaises(TypeError):
                net.run(self.ids.astype(np.complex64), self.x)
            with self.assertRaises(ValueError):
                net.run(self.ids + (1 << 25), self.x)
            with self.assertRaises(ValueError) as e:
                net.run(self.x)
            self.assertIn("takes 2 inputs (ids, x), got 1", str(e.exception))
            with self.assertRaises(ValueError) as e:
                net.run(ids=self.ids)
            self.assertIn("'x' not given", str(e.exception))
            with self.assertRaises(ValueError) as e:
                net.run(ids=self.ids, x=self.x, mask=self.ids)
            self.assertIn("no input 'mask'", str(e.exception))


if __name__ == "__main__":
    unittest.main()
