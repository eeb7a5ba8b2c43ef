#!/usr/bin/env python3
"""Count the Check test cases of the last `meson test` run in BUILDDIR.

Usage: ck_summary.py BUILDDIR [--subset]

Reads, for every suite meson knows (`meson introspect --tests`):
  - Check's XML log, the file its CK_XML_LOG_FILE_NAME names (tests/meson.build),
  - the skips it recorded, the file its KT_SKIP_LOG names (tests/kt_skip.h),
  - its result in meson-logs/testlog.json.
deploy/test.sh removes all three before the run, so nothing here is stale.

A passed test case recorded as skipped counts as skipped; a failed or errored
case counts as failed. A suite counts one failure more when its log is missing
or incomplete (it crashed or timed out), when meson saw it fail while every
case it logged passed (a crash after the last case, a leak checker, ...), or
when it did not run at all (unless --subset: `deploy/test.sh <suite>`).

Prints "FAILED ..." and "SKIPPED ..." lines, then the last line
"N passed, N failed, N skipped". Exit status 1 when anything failed.
"""
import html
import json
import os
import re
import subprocess
import sys

TEST_RE = re.compile(r'<test result="([a-z]+)">(.*?)</test>', re.S)


def field(body, tag):
    m = re.search(r"<%s>(.*?)</%s>" % (tag, tag), body, re.S)
    return html.unescape(m.group(1)) if m else ""


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    build = sys.argv[1]
    subset = "--subset" in sys.argv[2:]
    passed = failed = skipped = 0
    failures, skips = [], []

    try:
        tests = json.loads(subprocess.run(["meson", "introspect", "--tests", build],
                                          check=True, capture_output=True, text=True).stdout)
    except (OSError, subprocess.CalledProcessError, ValueError) as e:
        print("FAILED: cannot list the suites of %s: %s" % (build, e))
        print("0 passed, 1 failed, 0 skipped")
        return 1
    if not tests:
        failures.append("no test suites are defined in %s" % build)
        failed += 1

    results = {}
    try:
        with open(os.path.join(build, "meson-logs", "testlog.json")) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    results[r["name"]] = r["result"]
    except (OSError, ValueError) as e:
        failures.append("no meson test log (%s)" % e)
        failed += 1

    for t in tests:
        name, env = t["name"], t.get("env") or {}
        result = results.get(name)
        if result is None:
            if not subset:
                failures.append("suite %s: did not run" % name)
                failed += 1
            continue
        xml_path, skip_path = env.get("CK_XML_LOG_FILE_NAME"), env.get("KT_SKIP_LOG")
        if not xml_path or not skip_path:
            failures.append("suite %s: tests/meson.build sets no CK_XML_LOG_FILE_NAME "
                            "or KT_SKIP_LOG" % name)
            failed += 1
            continue
        skipped_here = {}
        if os.path.exists(skip_path):
            with open(skip_path, errors="replace") as f:
                for line in f:
                    test, _, reason = line.rstrip("\n").partition("\t")
                    skipped_here[test] = reason
        try:
            with open(xml_path, errors="replace") as f:
                xml = f.read()
        except OSError:
            xml = None
        suite_failed = False
        for m in TEST_RE.finditer(xml or ""):
            res, body = m.group(1), m.group(2)
            test = field(body, "id")
            where = "%s/%s/%s" % (name, field(body, "description"), test)
            if res != "success":
                failed += 1
                suite_failed = True
                failures.append("%s (%s): %s" % (where, field(body, "fn"), field(body, "message")))
            elif test in skipped_here:
                skipped += 1
                skips.append("%s: %s" % (where, skipped_here[test]))
            else:
                passed += 1
        if xml is None or "</testsuites>" not in xml:
            failures.append("suite %s: %s (meson: %s): it crashed or timed out"
                            % (name, "no Check log" if xml is None else "incomplete Check log",
                               result))
        elif result != "OK" and not suite_failed:
            failures.append("suite %s: meson reports %s although every logged case passed"
                            % (name, result))
        else:
            continue
        failed += 1

    for s in skips:
        print("SKIPPED " + s)
    for s in failures:
        print("FAILED " + s)
    print("%d passed, %d failed, %d skipped" % (passed, failed, skipped))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
