#!/bin/sh
# plot.sh - draw PNGs of time against tokens from distil-bench and baselines.py results.
# usage: bench/run/plot.sh OUTDIR RESULTS.json|RESULTS.csv...
# Writes OUTDIR/<workload>-<mode>-<dtype>-<shape>.png, one line per backend and baseline, with
# the floor dashed. Needs gnuplot (Debian: gnuplot-nox) and python3 (standard library only).
set -eu
if [ $# -lt 2 ]; then
    echo "usage: $0 OUTDIR RESULTS.json|RESULTS.csv..." >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
out=$1
shift
command -v gnuplot >/dev/null || { echo "$0: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }
mkdir -p "$out/data"
python3 "$here/../python/plot_data.py" "$out/data" "$@" > "$out/data/groups.txt"
while IFS='|' read -r key title files labels floor; do
    gnuplot -e "out='$out/$key.png'; ttl='$title'; files='$files'; labels='$labels'; floor='$floor'" \
        "$here/plot.gp"
    echo "$out/$key.png"
done < "$out/data/groups.txt"
