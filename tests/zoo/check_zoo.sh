#!/usr/bin/env bash
# Runs the model zoo (make_zoo.py) through ktune and compares each output with
# PyTorch's.
#
# usage: check_zoo.sh OUTDIR OPSET [MODEL...]   (every model of --list if none)
#
# For each model: makes OUTDIR/MODEL-oOPSET.onnx and its .npy files unless
# they are there already, runs
#   ktune run --onnx MODEL-oOPSET.onnx --db OUTDIR/zoo.db --input MODEL.x.npy
#             --output MODEL-oOPSET.ktune.npy --repeat 1
# (at most 600 s each; OUTDIR/zoo.db is an empty store, created if missing, so
# every task gets ktune's default schedule) and prints one line:
#   MODEL oOPSET: ok err=E (max|diff|=D, max|y|=Y)
#   MODEL oOPSET: FAIL <ktune's first error line, or the error figure>
# where E = max|ktune - pytorch| / max|pytorch|, ok when E <= 1e-4. A count
# comes last; each run's output is in OUTDIR/MODEL-oOPSET.log.
#
# Environment: KTUNE (default build/cli/ktune), PYTHON (default
# /usr/bin/python3), THREADS (ktune's --threads, default: the CPU count).
#
# Exit status: 0 when every model is ok, 1 otherwise, 2 bad usage.
set -u

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ktune=${KTUNE:-$root/build/cli/ktune}
python=${PYTHON:-/usr/bin/python3}
threads=${THREADS:-$(nproc)}
tolerance=1e-4
time_limit=600

if [ $# -lt 2 ]; then
    sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
fi
out=$1
opset=$2
shift 2
if [ $# -gt 0 ]; then
    models=("$@")
else
    mapfile -t models < <("$python" "$here/make_zoo.py" --list) || exit 1
fi
if [ ! -x "$ktune" ]; then
    echo "check_zoo: no ktune at $ktune (build it first: ninja -C build)" >&2
    exit 1
fi
mkdir -p "$out" || exit 1

# Make the models whose files are not all there yet, in one python process.
missing=()
for m in "${models[@]}"; do
    if [ ! -s "$out/$m-o$opset.onnx" ] || [ ! -s "$out/$m.x.npy" ] ||
       [ ! -s "$out/$m-o$opset.y.npy" ]; then
        missing+=("$m")
    fi
done
makelog="$out/make_zoo-o$opset.log"
if [ ${#missing[@]} -gt 0 ]; then
    echo "check_zoo: making ${missing[*]} (opset $opset; log in $makelog)" >&2
    "$python" "$here/make_zoo.py" "$out" "$opset" "${missing[@]}" >"$makelog" 2>&1
fi

# ktune run --db wants an existing store: an empty one, made by importing nothing.
db="$out/zoo.db"
if [ ! -e "$db" ]; then
    "$ktune" records import --db "$db" --in /dev/null >/dev/null || exit 1
fi

# Prints "ok err=..." or "FAIL ..." comparing ktune's output $1 with PyTorch's $2.
compare() {
    "$python" - "$1" "$2" "$tolerance" <<'EOF'
import sys
import numpy as np

got, want, tol = np.load(sys.argv[1]), np.load(sys.argv[2]), float(sys.argv[3])
if got.shape != want.shape:
    print(f"FAIL output shape {list(got.shape)}, PyTorch's {list(want.shape)}")
    sys.exit()
got, want = got.astype(np.float64), want.astype(np.float64)
diff = float(np.max(np.abs(got - want))) if got.size else 0.0
if got.size and not np.all(np.isfinite(got)):
    diff = float("nan")
big = float(np.max(np.abs(want))) if want.size else 0.0
err = diff / big if big > 0 else diff
verdict = "ok" if err <= tol else "FAIL"  # NaN fails too
print(f"{verdict} err={err:.3g} (max|diff|={diff:.3g}, max|y|={big:.3g})")
EOF
}

nok=0
nfail=0
for m in "${models[@]}"; do
    onnx="$out/$m-o$opset.onnx"
    x="$out/$m.x.npy"
    want="$out/$m-o$opset.y.npy"
    got="$out/$m-o$opset.ktune.npy"
    log="$out/$m-o$opset.log"
    rm -f "$got"
    if [ ! -s "$onnx" ] || [ ! -s "$x" ] || [ ! -s "$want" ]; then
        why=$(grep -m1 "^make_zoo: $m o$opset: FAILED" "$makelog" 2>/dev/null |
              sed "s/^make_zoo: $m o$opset: FAILED: //")
        [ -n "$why" ] || why=$(tail -n 1 "$makelog" 2>/dev/null)
        echo "$m o$opset: FAIL not exported: ${why:-see $makelog}"
        nfail=$((nfail + 1))
        continue
    fi
    # A model with a second input (MODEL.mask.npy) gets each by name.
    inputs=(--input "$x")
    [ -s "$out/$m.mask.npy" ] && inputs=(--input "x=$x" --input "mask=$out/$m.mask.npy")
    timeout "$time_limit" "$ktune" run --onnx "$onnx" --db "$db" "${inputs[@]}" --output "$got" \
        --repeat 1 --threads "$threads" >"$log" 2>"$log.err"
    rc=$?
    cat "$log.err" >>"$log"
    if [ $rc -eq 124 ]; then
        result="FAIL timed out after $time_limit s"
    elif [ $rc -ne 0 ]; then
        # ktune's errors start "ktune run: "; the other stderr lines (tasks
        # without a record) are notes.
        msg=$(grep -m1 '^ktune' "$log.err")
        [ -n "$msg" ] || msg=$(grep -v '^task [0-9]' "$log.err" | tail -n 1)
        result="FAIL ${msg:-ktune exited with status $rc}"
    elif [ ! -s "$got" ]; then
        result="FAIL ktune wrote no output"
    else
        result=$(compare "$got" "$want" 2>&1 | tail -n 1)
        case $result in
        ok* | FAIL*) ;;
        *) result="FAIL comparing: $result" ;;
        esac
    fi
    rm -f "$log.err"
    echo "$m o$opset: $result"
    case $result in
    ok*) nok=$((nok + 1)) ;;
    *) nfail=$((nfail + 1)) ;;
    esac
done

echo "opset $opset: $nok ok, $nfail failed of ${#models[@]}"
[ $nfail -eq 0 ]
