#!/usr/bin/env python3
"""Meson test 'python': the ktune Python package, installed and tested.

Usage: run_tests.py            (meson sets KT_SOURCE_ROOT, KT_BUILD_ROOT and
                                CK_XML_LOG_FILE_NAME)
       run_tests.py --child RESULTS   (inside the venv: run test_ktune.py)

1. Copies python/ and proto/ into <build>/tests/python/src (so the build
   leaves the source tree clean), makes a venv there with this interpreter
   (--system-site-packages: Debian's grpcio, protobuf, grpc_tools, numpy)
   and runs `pip install --no-index --no-build-isolation` on the copy, as
   docs/python.md tells users to: that is the case
   package_installs_offline_into_a_venv.
2. Runs the unittest cases of test_ktune.py with the venv's python; each
   outcome is appended to a results file as it happens.
3. Writes every case to $CK_XML_LOG_FILE_NAME in Check's XML format, which
   tests/ck_summary.py counts. A case that did not report (the test process
   crashed or hung) counts as failed, and so does the process's own exit
   status when it disagrees; the log is closed only when this script ends
   normally, so a crash of the script itself is counted too.
"""
import html
import inspect
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
INSTALL_CASE = "package_installs_offline_into_a_venv"


class CheckLog:
    """Check's XML log, one <test> element per case, written as it goes."""

    def __init__(self, path):
        self.f = open(path, "w")
        self.f.write('<?xml version="1.0"?>\n'
                     '<?xml-stylesheet type="text/xsl" '
                     'href="http://check.sourceforge.net/xml/check_unittest.xslt"?>\n'
                     '<testsuites xmlns="http://check.sourceforge.net/ns">\n'
                     "  <datetime>%s</datetime>\n  <suite>\n    <title>python</title>\n"
                     % time.strftime("%Y-%m-%d %H:%M:%S"))
        self.f.flush()
        self.start = time.monotonic()
        self.failed = 0

    def case(self, tcase, test, fn, ok, message, duration):
        self.failed += not ok
        e = html.escape
        self.f.write('    <test result="%s">\n      <path>tests/python</path>\n'
                     "      <fn>%s</fn>\n      <id>%s</id>\n      <iteration>0</iteration>\n"
                     "      <duration>%f</duration>\n      <description>%s</description>\n"
                     "      <message>%s</message>\n    </test>\n"
                     % ("success" if ok else "failure", e(fn), e(test), duration, e(tcase),
                        e(message if not ok else "Passed")))
        self.f.flush()
        print("%s: %s/%s (%.1f s)%s" % ("Passed" if ok else "FAILED", tcase, test, duration,
                                        "" if ok else "\n" + message), flush=True)

    def close(self):
        self.f.write("  </suite>\n  <duration>%f</duration>\n</testsuites>\n"
                     % (time.monotonic() - self.start))
        self.f.close()


def install(work, source):
    """The venv with the package installed; (python, None) or (None, why)."""
    src = os.path.join(work, "src")
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "ktune_pb2*.py")
    shutil.copytree(os.path.join(source, "python"), os.path.join(src, "python"), ignore=ignore)
    shutil.copytree(os.path.join(source, "proto"), os.path.join(src, "proto"))
    venv = os.path.join(work, "venv")
    steps = [[sys.executable, "-m", "venv", "--system-site-packages", venv],
             [os.path.join(venv, "bin", "pip"), "install", "--no-index", "--no-build-isolation",
              "--disable-pip-version-check", os.path.join(src, "python")]]
    for cmd in steps:
        p = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
        if p.returncode != 0:
            return None, "%s: exit %d\n%s" % (" ".join(cmd), p.returncode,
                                              (p.stdout + p.stderr)[-4000:])
    return os.path.join(venv, "bin", "python"), None


def exit_status(rc):
    return "was killed by signal %d" % -rc if rc < 0 else "exited with status %d" % rc


def main():
    source, build = os.environ["KT_SOURCE_ROOT"], os.environ["KT_BUILD_ROOT"]
    log = CheckLog(os.environ["CK_XML_LOG_FILE_NAME"])
    work = os.path.join(build, "tests", "python")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    t0 = time.monotonic()
    python, why = install(work, source)
    log.case("install", INSTALL_CASE, "run_tests.py:install", python is not None, why or "",
             time.monotonic() - t0)
    if python is None:
        log.close()
        return 1

    results = os.path.join(work, "results.jsonl")
    env = dict(os.environ, KTUNE_CLI=os.path.join(build, "cli", "ktune"))
    t0 = time.monotonic()
    p = subprocess.run([python, os.path.abspath(__file__), "--child", results], cwd=HERE,
                       env=env)
    planned, reported, setup_errors = [], {}, {}
    if os.path.exists(results):
        with open(results) as f:
            for line in f:
                r = json.loads(line)
                if "planned" in r:
                    planned = r["planned"]
                elif "setup_error" in r:
                    setup_errors[r["setup_error"]] = r["message"]
                else:
                    reported[(r["tcase"], r["test"])] = r
    for tcase, test, fn in planned:
        r = reported.get((tcase, test))
        if r is None:
            log.case(tcase, test, fn, False, "no result: " + setup_errors.get(
                tcase, "the test process %s first" % exit_status(p.returncode)), 0)
        else:
            log.case(tcase, test, fn, r["ok"], r["message"], r["duration"])
    if not planned or (p.returncode != 0 and log.failed == 0):
        log.case("python", "test_process_exits_cleanly", "run_tests.py:main", False,
                 "test_ktune.py %s after %d of %d cases"
                 % (exit_status(p.returncode), len(reported), len(planned)),
                 time.monotonic() - t0)
    log.close()
    return 1 if log.failed else 0


class _Result(unittest.TestResult):
    """Appends each case's outcome to the results file as it ends."""

    def __init__(self, out):
        super().__init__()
        self.out = out

    def startTest(self, test):
        super().startTest(test)
        self.t0 = time.monotonic()
        print("... %s" % test.id(), flush=True)

    def _report(self, test, ok, message):
        self.out.write(json.dumps({"tcase": type(test).__name__, "test": test._testMethodName,
                                   "ok": ok, "message": message,
                                   "duration": time.monotonic() - self.t0}) + "\n")
        self.out.flush()

    def addSuccess(self, test):
        super().addSuccess(test)
        self._report(test, True, "")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._report(test, False, self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        if isinstance(test, unittest.TestCase):
            self._report(test, False, self._exc_info_to_string(err, test))
        else:   # setUpClass or setUpModule: its cases stay unreported, so they fail
            # test.description: "setUpClass (test_ktune.TrackerTest)"
            tcase = test.description.rstrip(")").rsplit(".", 1)[-1]
            self.out.write(json.dumps({"setup_error": tcase, "message": "%s: %s" % (
                test.description, "".join(traceback.format_exception(*err)))}) + "\n")
            self.out.flush()

    def addSkip(self, test, reason):
        # ktune allows no skip here: everything these cases need is a dependency.
        super().addSkip(test, reason)
        self._report(test, False, "skipped: " + reason)


def _cases(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from _cases(t)
        else:
            yield t


def child(results):
    sys.path.insert(0, HERE)
    import test_ktune
    suite = unittest.defaultTestLoader.loadTestsFromModule(test_ktune)
    planned = []
    for t in _cases(suite):
        method = getattr(type(t), t._testMethodName)
        planned.append((type(t).__name__, t._testMethodName,
                        "test_ktune.py:%d" % inspect.getsourcelines(method)[1]))
    with open(results, "w") as out:
        out.write(json.dumps({"planned": planned}) + "\n")
        out.flush()
        result = _Result(out)
        suite.run(result)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        sys.exit(child(sys.argv[2]))
    sys.exit(main())
