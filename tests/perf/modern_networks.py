"""Current edge architectures against a device profile (a script, not a test: it prints figures).

Measures the zoo's current networks (DeiT-Tiny, MobileViT-XS, EfficientFormer-L1,
MobileNetV4-Conv-Small) and, with ``--classic``, the older CNN families, whole, on this
machine in interleaved rounds (``bench networks``, the one whole-network measuring path),
then evaluates the profile's estimates on them (``estimator evaluate --json``): per network
the measured latency, the uncalibrated (Eq. 7/8) and, for a calibrated profile, the
calibrated estimate, the 90 % CM_LV interval's coverage and width, and the fallback layers;
per group the mean and max |error|, coverage and mean width. The round-to-round spread of
the measurements (the noise floor) is printed beside them.

Every network here is outside any calibration set a profile has (``estimator evaluate``
leaves out, and says so, any network the profile was calibrated on), so each is predicted
with its family held out.

    python tests/perf/modern_networks.py --device host-cpu --work /tmp/modern --affinity 1
    python tests/perf/modern_networks.py --device vm-local --root /tmp/profiles --work W --classic
    python tests/perf/modern_networks.py --device vm-local --work W --skip-measure   # re-evaluate

Run it pinned (``taskset -c 1``, ``--affinity 1``) with nothing else on that core.
"""
from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

MODERN = ("deit_tiny", "mobilevit_xs", "efficientformer_l1", "mobilenet_v4_conv_small")
CLASSIC = ("resnet18", "mobilenet_v2", "mobilenet_v3", "efficientnet_b0", "shufflenet_v2", "googlenet", "mnasnet",
           "regnet_x_400mf")


def _run(cmd: list[str]) -> str:
    print("$ " + " ".join(cmd), file=sys.stderr)
    # the console scripts beside this interpreter: the venv's, whether or not it is on PATH
    exe = Path(sys.executable).parent / cmd[0]
    r = subprocess.run([str(exe) if exe.exists() else cmd[0], *cmd[1:]], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{cmd[0]} {cmd[1]} failed (exit {r.returncode}): {r.stderr.strip()[-2000:]}")
    return r.stdout


def _group(name: str) -> str:
    return "modern" if any(f"zoo:{m}@" in name for m in MODERN) else "classic"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", required=True, help="profile to evaluate")
    ap.add_argument("--root", default=None, help="profiles directory (default: $CL_PROFILES or profiles/)")
    ap.add_argument("--work", required=True, help="directory for the measured network set")
    ap.add_argument("--classic", action="store_true", help="also the older CNN families, in the same rounds")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--affinity", default=None, help="CPU list for ONNX Runtime's threads (bench --affinity)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip-measure", action="store_true", help="evaluate the network set already in --work")
    a = ap.parse_args(argv)

    work = Path(a.work)
    nets = work / "networks"
    root = ["--root", a.root] if a.root else []
    if not a.skip_measure:
        zoo = ",".join(MODERN + (CLASSIC if a.classic else ()))
        cmd = ["bench", "networks", "--device", a.device, *root, "--zoo", zoo, "--out", str(nets),
               "--rounds", str(a.rounds), "--threads", str(a.threads), "--db", str(work / "networks.sqlite"),
               "--no-progress"]
        if a.affinity:
            cmd += ["--affinity", a.affinity]
        _run(cmd)
    with open(nets / "networks.csv") as f:
        spreads = {r["name"]: float(r.get("spread_pct") or "nan") for r in csv.DictReader(f)}
    ev = ["estimator", "evaluate", "--device", a.device, "--networks", str(nets), "--json", "--no-progress"]
    if a.root:
        ev[4:4] = ["--profiles", a.root]
    doc = json.loads(_run(ev))
    res = doc["results"]
    cal = "lum" in res and "lum uncalibrated" in res
    unc = res["lum uncalibrated"] if cal else res["lum"]

    print(f"device {doc['device']}: {len(unc['networks'])} networks, CM_LV at 90 %"
          f"{'' if cal else ' (the profile is not calibrated)'}")
    head = f"{'network':34} {'measured':>9} {'spread':>7} {'uncal':>8} {'err':>7} {'cov/width':>11}"
    if cal:
        head += f" {'calib':>8} {'err':>7} {'cov/width':>11}"
    print(head + f" {'fallback':>8}")
    rows = {"modern": [], "classic": []}
    for name, r in unc["networks"].items():
        iv = r["intervals"]["CM_LV"]["0.9"]
        line = (f"{name:34} {r['measured_ms']:9.2f} {spreads.get(name, float('nan')):6.1f}% "
                f"{r['predicted_ms']:8.2f} {r['error_pct']:+6.1f}% {'yes' if iv['covered'] else 'NO':>4} "
                f"{iv['rel_width']:5.0%}")
        c = res["lum"]["networks"][name] if cal else None
        if c is not None:
            ci = c["intervals"]["CM_LV"]["0.9"]
            line += f" {c['predicted_ms']:8.2f} {c['error_pct']:+6.1f}% {'yes' if ci['covered'] else 'NO':>4} {ci['rel_width']:5.0%}"
        print(line + f" {r['n_fallback']:8d}")
        rows[_group(name)].append((r, c))

    def summary(pairs: list, which: int) -> str:
        rs = [p[which] for p in pairs if p[which] is not None]
        if not rs:
            return "-"
        errs = [abs(r["error_pct"]) for r in rs]
        cov = sum(r["intervals"]["CM_LV"]["0.9"]["covered"] for r in rs)
        width = statistics.mean(r["intervals"]["CM_LV"]["0.9"]["rel_width"] for r in rs)
        return (f"mean |err| {statistics.mean(errs):.1f} % (max {max(errs):.1f} %), CM_LV 90 % covers "
                f"{cov}/{len(rs)} at mean width {width:.0%}")

    for g, pairs in rows.items():
        if not pairs:
            continue
        fb = sum(p[0]["n_fallback"] for p in pairs)
        sp = statistics.median(spreads.get(n, float("nan")) for n in unc["networks"] if _group(n) == g)
        print(f"{g}: uncalibrated {summary(pairs, 0)}; fallback layers {fb}; median spread {sp:.1f} %")
        if cal:
            print(f"{g}: calibrated   {summary(pairs, 1)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
