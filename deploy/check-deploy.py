#!/usr/bin/python3
"""Checks deploy/systemd and deploy/k8s: what the daemons need is there and consistent.

  check-deploy.py systemd UNIT_DIR [--bin NAME=PATH ...]
      Static checks of the units (hardening, the token credential reaching the daemon,
      the tracker's store in its state directory, the runner instanced by device), then
      `systemd-analyze verify` of copies whose ExecStart points at PATH for NAME
      (ExecStart must name /usr/local/bin/NAME: the meson install prefix).
      verify only warns about unknown keys and bad values and still exits 0, so any
      diagnostic it prints counts as a failure here.
  check-deploy.py k8s MANIFEST_DIR
      Parses every *.yaml and checks the tracker StatefulSet, its Service, the runner
      DaemonSet and the worker Deployment for the fields the daemons need.

Prints one 'ok ...' line per checked object with its key fields and exits 0, or prints
'error: ...' lines and exits 1 (2 on bad usage).
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

errors = []


def err(msg):
    errors.append(msg)
    print("error: " + msg)


# ---- systemd ---------------------------------------------------------------------------------

def parse_unit(path):
    """The unit as {section: [(key, value), ...]} (keys repeat: LoadCredential, DeviceAllow)."""
    sections, cur = {}, None
    with open(path) as f:
        for raw in f:
            line = raw.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("[") and line.endswith("]"):
                cur = sections.setdefault(line[1:-1], [])
            elif "=" in line and cur is not None:
                k, v = line.split("=", 1)
                cur.append((k.strip(), v.strip()))
    return sections


def values(sec, key):
    return [v for k, v in sec if k == key]


def env_assignments(sec):
    """Environment= assignments (several per line, optionally quoted)."""
    out = {}
    for v in values(sec, "Environment"):
        for m in re.finditer(r'"([^"=]+)=([^"]*)"|([^\s"=]+)=(\S*)', v):
            if m.group(1):
                out[m.group(1)] = m.group(2)
            else:
                out[m.group(3)] = m.group(4)
    return out


HARDENING = {"ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
             "NoNewPrivileges": "yes"}


def check_unit(path):
    name = os.path.basename(path)
    u = parse_unit(path)
    svc = u.get("Service")
    if svc is None:
        err(f"{name}: no [Service] section")
        return None
    for k, want in HARDENING.items():
        got = values(svc, k)
        if got[-1:] != [want]:
            err(f"{name}: {k}={want} missing (got {got or 'nothing'})")
    if values(svc, "DynamicUser")[-1:] != ["yes"] and values(svc, "User")[-1:] != ["ktune"]:
        err(f"{name}: neither DynamicUser=yes nor User=ktune")
    execs = values(svc, "ExecStart")
    if len(execs) != 1:
        err(f"{name}: wants one ExecStart, has {len(execs)}")
        return None
    argv = execs[0].split()
    daemon = os.path.basename(argv[0])
    if not argv[0].startswith("/usr/local/bin/ktune-"):
        err(f"{name}: ExecStart {argv[0]} is not /usr/local/bin/ktune-* (meson install prefix)")

    # The token: a credential, and the daemon told where systemd puts it.
    creds = {}
    for v in values(svc, "LoadCredential"):
        cname, _, src = v.partition(":")
        creds[cname] = src
    env = env_assignments(svc)
    token = None
    if "--token-file" in argv:
        token = argv[argv.index("--token-file") + 1]
    elif "KT_TOKEN_FILE" in env:
        token = env["KT_TOKEN_FILE"]
    if token is None:
        err(f"{name}: the daemon gets no token file (--token-file or KT_TOKEN_FILE)")
    else:
        m = re.fullmatch(r"(?:%d|\$\{CREDENTIALS_DIRECTORY\})/(\S+)", token)
        if not m:
            err(f"{name}: token file {token} is not in the credentials directory (%d/NAME)")
        elif m.group(1) not in creds:
            err(f"{name}: token credential '{m.group(1)}' is not loaded (LoadCredential=)")

    # Every ${VAR} the command line uses is set somewhere (Environment or a file).
    env_files = values(svc, "EnvironmentFile")
    for var in re.findall(r"\$\{(\w+)\}", execs[0]):
        if var not in env and not any(not f.startswith("-") for f in env_files):
            err(f"{name}: ExecStart uses ${{{var}}}, which nothing sets")

    fields = {"daemon": daemon, "token": token}
    if daemon == "ktune-tracker":
        state = values(svc, "StateDirectory")
        db = argv[argv.index("--db") + 1] if "--db" in argv else None
        if not state:
            err(f"{name}: the tracker has no StateDirectory for its store")
        elif db is None or not db.startswith(f"%S/{state[-1]}/"):
            err(f"{name}: --db {db} is not in the state directory %S/{state[-1]}")
        fields["db"] = db
    if daemon == "ktune-runner":
        if "@" not in name:
            err(f"{name}: the runner unit is not a template (ktune-runner@DEVICE)")
        if not any("%i" in f for f in env_files):
            err(f"{name}: no EnvironmentFile names the instance (%i)")
        for opt in ("--tracker", "--key", "--device"):
            if opt not in argv:
                err(f"{name}: ExecStart lacks {opt}")
        fields["key"] = argv[argv.index("--key") + 1] if "--key" in argv else None
        fields["device"] = argv[argv.index("--device") + 1] if "--device" in argv else None
    return fields


def verify_units(unit_dir, units, bins):
    """systemd-analyze verify on copies with ExecStart rewritten to the given binaries."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        err("systemd-analyze not found (apt-get install systemd; deploy/install-deps.sh)")
        return
    with tempfile.TemporaryDirectory(prefix="kt-units-") as tmp:
        names = []
        for path in units:
            text = open(path).read()
            for daemon, binary in bins.items():
                text = text.replace(f"/usr/local/bin/{daemon} ", f"{binary} ")
            dst = os.path.join(tmp, os.path.basename(path))
            with open(dst, "w") as f:
                f.write(text)
            base = os.path.basename(path)
            # A template is verified through instances, one GPU and one CPU.
            if base.endswith("@.service"):
                names += [os.path.join(tmp, base.replace("@.", f"@{i}.")) for i in ("cuda0", "cpu")]
            else:
                names.append(dst)
        # Drop-ins (NAME.service.d/*.conf) are read from beside the units.
        for d in glob.glob(os.path.join(unit_dir, "tls", "*.service.d")):
            shutil.copytree(d, os.path.join(tmp, os.path.basename(d)))
        r = subprocess.run([tool, "verify", "--man=no"] + names, capture_output=True, text=True)
        diag = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
        for ln in diag:
            err("systemd-analyze verify: " + ln)
        if r.returncode != 0 and not diag:
            err(f"systemd-analyze verify exited {r.returncode}")
        if r.returncode == 0 and not diag:
            print("ok systemd-analyze verify " + " ".join(os.path.basename(n) for n in names))


def cmd_systemd(args):
    if not args:
        return usage()
    unit_dir, bins = args[0], {}
    for a in args[1:]:
        if a == "--bin":
            continue
        name, _, path = a.partition("=")
        if not path:
            return usage()
        bins[name] = path
    units = sorted(glob.glob(os.path.join(unit_dir, "*.service")))
    want = {"ktune-tracker.service", "ktune-runner@.service", "ktune-worker.service"}
    missing = want - {os.path.basename(u) for u in units}
    for m in sorted(missing):
        err(f"{m} missing from {unit_dir}")
    for path in units:
        before = len(errors)
        fields = check_unit(path)
        if fields and len(errors) == before:
            print("ok unit " + os.path.basename(path) + " " +
                  " ".join(f"{k}={v}" for k, v in fields.items()))
    # TLS drop-ins (tls/UNIT.d/*.conf): what they set reaches the daemon's command line.
    for conf in sorted(glob.glob(os.path.join(unit_dir, "tls", "*.service.d", "*.conf"))):
        unit = os.path.basename(os.path.dirname(conf))[:-2]
        base = os.path.join(unit_dir, unit)
        if not os.path.exists(base):
            err(f"{conf}: no unit {unit} to extend")
            continue
        env = env_assignments(parse_unit(conf).get("Service", []))
        execs = values(parse_unit(base)["Service"], "ExecStart")
        for var in env:
            if not re.search(r"\$\{?" + var + r"\b", execs[0] if execs else ""):
                err(f"{conf}: {var} is not used by {unit}'s ExecStart")
        print(f"ok drop-in {unit}.d/{os.path.basename(conf)} sets {' '.join(sorted(env))}")
    if not errors:
        verify_units(unit_dir, units, bins)
    return 1 if errors else 0


# ---- Kubernetes ------------------------------------------------------------------------------

def arg_map(c):
    """--name=value / --name value arguments of a container as {name: value}."""
    out, args = {}, list(c.get("args", []))
    i = 0
    while i < len(args):
        a = str(args[i])
        if a.startswith("--") and "=" in a:
            k, v = a[2:].split("=", 1)
            out[k] = v
        elif a.startswith("--") and i + 1 < len(args) and not str(args[i + 1]).startswith("--"):
            out[a[2:]] = str(args[i + 1])
            i += 1
        elif a.startswith("--"):
            out[a[2:]] = ""
        i += 1
    return out


def pod_spec(obj):
    return obj.get("spec", {}).get("template", {}).get("spec", {})


def check_container_common(what, obj, c, secrets):
    args = arg_map(c)
    env = {e["name"] for e in c.get("env", []) if "name" in e}
    for a in c.get("args", []):
        for var in re.findall(r"\$\((\w+)\)", str(a)):
            if var not in env:
                err(f"{what}: argument {a} uses $({var}), which the container's env lacks")
    # The token: --token-file names a file inside the mount of a Secret volume.
    token = args.get("token-file")
    if not token:
        err(f"{what}: no --token-file")
        return args
    vols = {v["name"]: v for v in pod_spec(obj).get("volumes", [])}
    found = False
    for m in c.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/")
        if not token.startswith(mp + "/"):
            continue
        key = token[len(mp) + 1:]
        sec = vols.get(m["name"], {}).get("secret")
        if sec is None:
            err(f"{what}: {token} is mounted from volume {m['name']}, not a Secret")
            found = True
            continue
        name = sec.get("secretName")
        if secrets and name not in secrets:
            err(f"{what}: Secret {name} is not among the manifests' Secrets {sorted(secrets)}")
        keys = [i["path"] for i in sec.get("items", [])] or (secrets.get(name) or [key])
        if key not in keys:
            err(f"{what}: {token} names key '{key}', the Secret {name} has {keys}")
        found = True
    if not found:
        err(f"{what}: --token-file {token} is not under any volume mount")
    return args


def port_of(addr):
    return int(addr.rsplit(":", 1)[1]) if addr and ":" in addr else None


def container_ports(c):
    return {p.get("containerPort"): p.get("name") for p in c.get("ports", [])}


def cmd_k8s(args):
    if len(args) != 1:
        return usage()
    try:
        import yaml
    except ImportError:
        err("python3-yaml is missing (apt-get install python3-yaml; deploy/install-deps.sh)")
        return 1
    objs = []
    for path in sorted(glob.glob(os.path.join(args[0], "*.yaml"))):
        with open(path) as f:
            try:
                objs += [(os.path.basename(path), o) for o in yaml.safe_load_all(f) if o]
            except yaml.YAMLError as e:
                err(f"{os.path.basename(path)}: {e}")
    by_kind = {}
    for fname, o in objs:
        by_kind.setdefault(o.get("kind"), []).append(o)
    secrets = {s["metadata"]["name"]: sorted(list(s.get("data", {})) + list(s.get("stringData", {})))
               for s in by_kind.get("Secret", [])}

    # Tracker: StatefulSet with a claim for the store, a Service with both ports.
    tracker_svc = None
    sts = [o for o in by_kind.get("StatefulSet", []) if "tracker" in o["metadata"]["name"]]
    if len(sts) != 1:
        err(f"want one tracker StatefulSet, found {len(sts)}")
    for o in sts:
        what = "StatefulSet/" + o["metadata"]["name"]
        if o["spec"].get("replicas", 1) != 1:
            err(f"{what}: replicas must be 1 (one writer per store)")
        c = pod_spec(o)["containers"][0]
        a = check_container_common(what, o, c, secrets)
        claims = {t["metadata"]["name"] for t in o["spec"].get("volumeClaimTemplates", [])}
        db = a.get("db")
        mounts = [m for m in c.get("volumeMounts", []) if m["name"] in claims]
        if not claims:
            err(f"{what}: no volumeClaimTemplates for the store")
        if not db or not any(db.startswith(m["mountPath"].rstrip("/") + "/") for m in mounts):
            err(f"{what}: --db {db} is not on a claimed volume")
        ports = container_ports(c)
        for want, opt in ((9190, "listen"), (9191, "http")):
            if port_of(a.get(opt)) != want or want not in ports:
                err(f"{what}: --{opt} {a.get(opt)} / containerPort {want} mismatch")
        labels = o["spec"]["template"]["metadata"].get("labels", {})
        for s in by_kind.get("Service", []):
            sel = s["spec"].get("selector", {})
            if sel and all(labels.get(k) == v for k, v in sel.items()):
                tracker_svc = s
        if tracker_svc is None:
            err(f"{what}: no Service selects the tracker's pods")
        else:
            sp = {p["port"]: p for p in tracker_svc["spec"].get("ports", [])}
            for want in (9190, 9191):
                if want not in sp:
                    err(f"Service/{tracker_svc['metadata']['name']}: port {want} missing")
                else:
                    tp = sp[want].get("targetPort", want)
                    if tp not in ports and tp not in ports.values():
                        err(f"Service/{tracker_svc['metadata']['name']}: port {want} targets "
                            f"{tp}, which the tracker does not expose")
        print(f"ok {what} db={db} claim={','.join(sorted(claims))} token={a.get('token-file')} "
              f"service={tracker_svc['metadata']['name'] if tracker_svc else None} ports=9190,9191")
    svc_name = tracker_svc["metadata"]["name"] if tracker_svc else None

    def check_tracker_arg(what, a):
        t = a.get("tracker")
        if not t or svc_name is None or t.rsplit(":", 1)[0].split(".")[0] != svc_name \
                or port_of(t) != 9190:
            err(f"{what}: --tracker {t} is not the tracker Service {svc_name}:9190")

    # Runners: a DaemonSet per GPU model, one GPU per pod.
    ds = [o for o in by_kind.get("DaemonSet", []) if "runner" in o["metadata"]["name"]]
    if not ds:
        err("no runner DaemonSet")
    for o in ds:
        what = "DaemonSet/" + o["metadata"]["name"]
        c = pod_spec(o)["containers"][0]
        a = check_container_common(what, o, c, secrets)
        check_tracker_arg(what, a)
        for opt in ("key", "device", "listen"):
            if not a.get(opt):
                err(f"{what}: no --{opt}")
        if a.get("device") and not re.fullmatch(r"cpu|cuda:\d+", a["device"]):
            err(f"{what}: --device {a['device']} is not cpu or cuda:N")
        gpu = ((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu")
        if str(gpu) != "1":
            err(f"{what}: resources.limits nvidia.com/gpu is {gpu}, want 1")
        lp = port_of(a.get("listen"))
        if lp not in container_ports(c):
            err(f"{what}: --listen port {lp} is not a containerPort")
        if port_of(a.get("advertise")) not in (None, lp):
            err(f"{what}: --advertise {a.get('advertise')} is not the listen port {lp}")
        print(f"ok {what} tracker={a.get('tracker')} key={a.get('key')} device={a.get('device')} "
              f"token={a.get('token-file')} gpu={gpu} port={lp}")

    # Workers.
    dep = [o for o in by_kind.get("Deployment", []) if "worker" in o["metadata"]["name"]]
    if not dep:
        err("no worker Deployment")
    for o in dep:
        what = "Deployment/" + o["metadata"]["name"]
        c = pod_spec(o)["containers"][0]
        a = check_container_common(what, o, c, secrets)
        check_tracker_arg(what, a)
        lp = port_of(a.get("listen"))
        if lp not in container_ports(c):
            err(f"{what}: --listen port {lp} is not a containerPort")
        print(f"ok {what} tracker={a.get('tracker')} token={a.get('token-file')} port={lp}")
    return 1 if errors else 0


def usage():
    print(__doc__.strip(), file=sys.stderr)
    return 2


def main(argv):
    if len(argv) < 2:
        return usage()
    if argv[1] == "systemd":
        return cmd_systemd(argv[2:])
    if argv[1] == "k8s":
        return cmd_k8s(argv[2:])
    return usage()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
